#pragma once

// What `run` measured of one execution mode, on either device. The measuring (cpu_modes.cpp,
// cuda_modes.cpp) fills it and the printers (run_report.cpp) read it, as nvbench keeps its
// measurements apart from its printers. Speedups are not stored: they are ratios between the
// modes of one run, taken by speedup() here.

#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "opara/compiled_model.h"
#include "opara/plan.h"

namespace opara::bench {

// The outputs against the run's reference: on the CPU the exporter's reference outputs (none with
// random inputs of another shape), on the GPU eager's outputs on the GPU. Unset: not compared.
struct OutputsCheck {
  std::optional<double> max_abs_diff;
  std::optional<double> max_rel_diff;  // over the reference's largest magnitude, output by output
  std::optional<bool> bitwise_equal;
  // The CPU: a planned mode, not bitwise equal, whose workers had fewer intra-op threads than the
  // reference: whether it equals eager run at their thread count.
  std::optional<bool> bitwise_equal_eager_same_threads;
};

struct ModeResult {
  std::string mode;
  // The GPU runs eager first as the reference even when --modes does not list it: it is then a
  // baseline of the speedups but has no row.
  bool reported = true;
  std::vector<std::vector<double>> rounds_ms;  // every timed run's milliseconds, by round (GPU: one round)
  std::vector<at::Tensor> outputs;             // the last run's
  OutputsCheck check;
  std::optional<std::size_t> peak_bytes;  // the GPU: most bytes the mode allocated, compile and runs
  // The GPU: most bytes allocated while the timed runs ran, over those before compile: what the
  // compiled model holds (its pool, workspaces, static buffers) and its runs' own, compile's
  // transient left out: what serving it costs.
  std::optional<std::size_t> run_peak_bytes;
  std::optional<std::size_t> peak_live_values;  // the CPU's eager: most intermediate values alive at once
  std::string schedule;  // how it ran, in words: "node by node, one thread pool", "3 of 4 streams x 1 threads, ..."
  // Planned modes: planned_figures(), and on the GPU the overflow's; empty for eager.
  nlohmann::json figures = nlohmann::json::object();
  // The GPU: the candidates compile() measured and the one it kept, for under the table; or empty.
  std::string candidates_note;

  // Every timed run, round after round.
  [[nodiscard]] std::vector<double> samples_ms() const;
};

// A run's modes and what the measuring has to say under their table.
struct MeasuredModes {
  std::vector<ModeResult> modes;
  std::vector<std::string> notes;
};

// The mode named `name`, or null when it did not run.
const ModeResult* find_mode(const std::vector<ModeResult>& modes, std::string_view name);

// How many times faster `mode` ran than `baseline` in this run: in each round the baseline's median
// over the mode's, and the median of those ratios, so that the machine's drift between rounds
// cancels out (one round: the ratio of the medians).
std::vector<double> speedups_by_round(const ModeResult& mode, const ModeResult& baseline);
double speedup(const ModeResult& mode, const ModeResult& baseline);

// A planned mode's figures: every key of to_json(CompiledStats) but `device` (the report's) and
// `peak_bytes` (the bench measures the mode's own), `tuning` only when the CPU tuner ran; and the
// plan's `stream_policy`, `order_policy`, `cost_source`, `streams_uncapped` (the streams `plan`
// opens on `graph` without a cap), `tuned`, and `priorities` (the CPU's: "searched" or
// "critical-path"; null on the GPU).
nlohmann::json planned_figures(const CompiledModel& compiled, const Graph& graph, PlanOptions plan);

}  // namespace opara::bench
