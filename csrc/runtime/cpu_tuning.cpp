#include "opara/cpu_tuning.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "elapsed.h"
#include "percentile.h"
#include "round_timing.h"

namespace opara {

std::vector<CpuShape> cpu_shape_candidates(int cores, int one_stream_threads) {
  std::vector<CpuShape> shapes = {{1, std::max(1, one_stream_threads)}};
  if (cores < 2) return shapes;
  shapes.push_back({0, 1});
  // Powers of two keep a many-core machine's list short; every cap from 2 up would take minutes.
  for (int cap = 2; cap < cores; cap *= 2) shapes.push_back({cap, 1});
  shapes.push_back({cores, 1});
  return shapes;
}

namespace {

struct Candidate {
  CpuTuningCandidate report;
  std::unique_ptr<CpuParallelExecutor> executor;
  double plan_us = 0;
  double last_run_ms = 0;
};

std::vector<double> time_runs(CpuParallelExecutor& executor, const std::vector<c10::IValue>& inputs, int runs) {
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(std::max(runs, 0)));
  for (int i = 0; i < runs; ++i) {
    const auto started = std::chrono::steady_clock::now();
    executor.run(inputs);
    samples.push_back(milliseconds_since(started));
  }
  return samples;
}

// Runs per round that keep `candidates` blocks a round, each settling first, within the budget.
int runs_within_budget(const CpuTuningOptions& tuning, std::size_t candidates, double run_ms) {
  if (tuning.budget_ms <= 0 || run_ms <= 0) return tuning.runs;
  const double per_block_ms = tuning.budget_ms / (static_cast<double>(tuning.rounds) * static_cast<double>(candidates));
  const double settle_ms = std::max(static_cast<double>(tuning.settle.count()), run_ms);
  const auto affordable = static_cast<int>(std::floor((per_block_ms - settle_ms) / run_ms));
  return std::clamp(affordable, 1, tuning.runs);
}

}  // namespace

CpuTuning tune_cpu_executor(const Graph& graph, PlanOptions plan_options, const std::vector<NodeCost>& costs,
                            const std::vector<c10::IValue>& inputs, CpuExecutorOptions executor_options,
                            const CpuTuningOptions& tuning) {
  const auto started = std::chrono::steady_clock::now();
  const int cores = usable_cores();
  const int one_stream_threads = executor_options.intra_op_threads > 0 ? executor_options.intra_op_threads : cores;
  std::vector<CpuShape> shapes = cpu_shape_candidates(cores, one_stream_threads);
  if (plan_options.streams == StreamPolicy::kSingle) shapes.resize(1);

  int uncapped_streams = 0;
  std::vector<Candidate> candidates;
  for (const CpuShape& shape : shapes) {
    plan_options.max_streams = shape.max_streams;
    const auto planning = std::chrono::steady_clock::now();
    Plan plan = make_plan(graph, plan_options, costs);
    const double plan_us = milliseconds_since(planning) * 1000;
    if (shape.max_streams == 0) uncapped_streams = plan.stream_count;
    // A cap at or past the uncapped stream count plans the uncapped plan again.
    if (shape.max_streams > 1 && uncapped_streams > 0 && shape.max_streams >= uncapped_streams) continue;
    Candidate& candidate = candidates.emplace_back();
    candidate.report.shape = shape;
    candidate.report.streams = plan.stream_count;
    candidate.plan_us = plan_us;
    executor_options.intra_op_threads = shape.intra_op_threads;
    candidate.executor = std::make_unique<CpuParallelExecutor>(graph, std::move(plan), executor_options);
    // Warm-up: the first candidate also warms the process (allocator, ATen's kernels).
    const std::vector<double> warmup = time_runs(*candidate.executor, inputs, std::max(1, tuning.warmup_runs));
    candidate.last_run_ms = warmup.back();
  }

  CpuTuning result;
  if (candidates.size() > 1) {
    double run_ms = 0;
    for (const Candidate& candidate : candidates) run_ms = std::max(run_ms, candidate.last_run_ms);
    result.runs_per_round = runs_within_budget(tuning, candidates.size(), run_ms);
    std::vector<BlockTimer> timers;
    for (Candidate& candidate : candidates) {
      timers.push_back([&candidate, &inputs](int runs) { return time_runs(*candidate.executor, inputs, runs); });
    }
    const RoundTimes times =
        time_in_rounds(timers, tuning.rounds, tuning.rounds * result.runs_per_round, Settle{1, tuning.settle});
    for (std::size_t k = 0; k < candidates.size(); ++k) {
      candidates[k].report.median_ms = percentile(times.all(k), 0.5);
      candidates[k].report.speedup = k == 0 ? 1.0 : times.speedup(k, 0);
      if (candidates[k].report.speedup > candidates[result.chosen].report.speedup) result.chosen = k;
    }
  } else {
    candidates.front().report.median_ms = candidates.front().last_run_ms;
  }
  for (const Candidate& candidate : candidates) result.candidates.push_back(candidate.report);
  result.plan_us = candidates[result.chosen].plan_us;
  result.executor = std::move(candidates[result.chosen].executor);
  result.tuning_ms = milliseconds_since(started);
  return result;
}

}  // namespace opara
