#include "mode_result.h"

#include <algorithm>

#include "options/stats_json.h"
#include "support/internal_assert.h"
#include "support/percentile.h"
#include "tuning/round_timing.h"

namespace opara::bench {

std::vector<double> ModeResult::samples_ms() const {
  std::vector<double> samples;
  for (const std::vector<double>& round : rounds_ms) samples.insert(samples.end(), round.begin(), round.end());
  return samples;
}

const ModeResult* find_mode(const std::vector<ModeResult>& modes, std::string_view name) {
  const auto found =
      std::find_if(modes.begin(), modes.end(), [&](const ModeResult& mode) { return mode.mode == name; });
  return found == modes.end() ? nullptr : &*found;
}

std::vector<double> speedups_by_round(const ModeResult& mode, const ModeResult& baseline) {
  OPARA_ASSERT(mode.rounds_ms.size() == baseline.rounds_ms.size(), "{} was timed in {} rounds and {} in {}", mode.mode,
               mode.rounds_ms.size(), baseline.mode, baseline.rounds_ms.size());
  return RoundTimes{{mode.rounds_ms, baseline.rounds_ms}}.speedups(0, 1);
}

double speedup(const ModeResult& mode, const ModeResult& baseline) {
  return percentile(speedups_by_round(mode, baseline), 0.5);
}

nlohmann::json planned_figures(const CompiledModel& compiled, const Graph& graph, PlanOptions plan) {
  plan.max_streams = 0;  // no costs needed: the count of streams is the policy's
  const Plan uncapped = make_plan(graph, plan);
  const CompiledStats stats = compiled.stats();
  const Plan& chosen = compiled.plan();
  nlohmann::json figures = stats_json(stats);
  figures.erase("device");
  figures.erase("peak_bytes");
  const bool tuned = !stats.tuning.empty();
  if (!tuned) figures.erase("tuning");
  if (stats.candidates.empty()) figures.erase("candidates");
  const bool searched = tuned && stats.tuning[stats.tuning_chosen].searched_priorities;
  const bool on_gpu = stats.device.rfind("cuda", 0) == 0;
  figures["stream_policy"] = to_string(chosen.stream_policy);
  figures["order_policy"] = to_string(chosen.order_policy);
  figures["cost_source"] = chosen.cost_source;
  figures["streams_uncapped"] = uncapped.stream_count;
  figures["tuned"] = tuned;
  figures["priorities"] = on_gpu ? nlohmann::json(nullptr) : nlohmann::json(searched ? "searched" : "critical-path");
  return figures;
}

}  // namespace opara::bench
