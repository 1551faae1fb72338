#include "options/stats_json.h"

namespace opara {
namespace {

nlohmann::json tuning_json(const CompiledStats& stats) {
  nlohmann::json tuning = nlohmann::json::array();
  for (std::size_t k = 0; k < stats.tuning.size(); ++k) {
    const CpuTuningCandidate& candidate = stats.tuning[k];
    tuning.push_back({{"max_streams", candidate.shape.max_streams},
                      {"intra_op_threads", candidate.shape.intra_op_threads},
                      {"streams", candidate.streams},
                      {"median_ms", candidate.median_ms},
                      {"speedup", candidate.speedup},
                      {"searched_priorities", candidate.searched_priorities},
                      {"replay_speedup", candidate.replay_speedup},
                      {"chosen", k == stats.tuning_chosen}});
  }
  return tuning;
}

nlohmann::json candidates_json(const CompiledStats& stats) {
  nlohmann::json candidates = nlohmann::json::array();
  for (std::size_t k = 0; k < stats.candidates.size(); ++k) {
    const CudaCandidate& candidate = stats.candidates[k];
    candidates.push_back({{"max_streams", candidate.max_streams},
                          {"streams", candidate.streams},
                          {"median_ms", candidate.median_ms},
                          {"speedup", candidate.speedup},
                          {"pool_bytes", candidate.pool_bytes},
                          {"over_budget", candidate.over_budget},
                          {"pool_estimate_bytes", candidate.pool_estimate_bytes},
                          {"workspace_bytes", candidate.workspace_bytes},
                          {"workspace_estimate_bytes", candidate.workspace_estimate_bytes},
                          {"chosen", k == stats.candidate_chosen}});
  }
  return candidates;
}

}  // namespace

nlohmann::json stats_json(const CompiledStats& stats) {
  return {
      {"device", stats.device},
      {"streams", stats.streams},
      {"events", stats.events},
      {"captured_nodes", stats.captured_nodes},
      {"graph_nodes", stats.graph_nodes},
      {"segments", stats.segments},
      {"host_nodes", stats.host_nodes},
      {"cpu_nodes", stats.cpu_nodes},
      {"bytes_to_host", stats.bytes_to_host},
      {"bytes_to_device", stats.bytes_to_device},
      {"host_ms", stats.host_ms},
      {"predicted_none_us", stats.predicted_none_us},
      {"predicted_us", stats.predicted_us},
      {"compile_ms", stats.compile_ms},
      {"plan_us", stats.plan_us},
      {"intra_op_threads", stats.intra_op_threads},
      {"tuning_ms", stats.tuning_ms},
      {"capture_ms", stats.capture_ms},
      {"pool_bytes", stats.pool_bytes},
      {"memory", std::string(to_string(stats.memory))},
      {"pool_bytes_record_stream", stats.pool_bytes_record_stream},
      {"pool_bytes_keep_alive", stats.pool_bytes_keep_alive},
      {"workspace_bytes", stats.workspace_bytes},
      {"peak_bytes", stats.peak_bytes},
      {"runs", stats.runs},
      {"eager_fallbacks", stats.eager_fallbacks},
      {"tuning", tuning_json(stats)},
      {"tuning_timings", stats.tuning_timings},
      {"measure_ms", stats.measure_ms},
      {"memory_budget_bytes", stats.memory_budget_bytes},
      {"pool_estimate_bytes", stats.pool_estimate_bytes},
      {"sequential_pool_estimate_bytes", stats.sequential_pool_estimate_bytes},
      {"workspace_estimate_bytes", stats.workspace_estimate_bytes},
      {"budget_stream_cap", stats.budget_stream_cap},
      {"candidates", candidates_json(stats)},
  };
}

std::string to_json(const CompiledStats& stats) {
  return stats_json(stats).dump();
}

std::vector<std::pair<std::string, double>> numeric_stats(const CompiledStats& stats) {
  std::vector<std::pair<std::string, double>> numbers;
  const nlohmann::json json = stats_json(stats);  // items() only refers to it
  for (const auto& [key, value] : json.items()) {
    if (value.is_number()) numbers.emplace_back(key, value.get<double>());
  }
  numbers.emplace_back("keep_alive", stats.memory == MemoryProtection::kKeepAlive ? 1 : 0);
  return numbers;
}

}  // namespace opara
