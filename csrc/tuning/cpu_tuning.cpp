#include "tuning/cpu_tuning.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>

#include "exec/undo_writes.h"
#include "graph/graph_analysis.h"
#include "support/elapsed.h"
#include "support/percentile.h"
#include "tuning/measured_choice.h"
#include "tuning/round_timing.h"
#include "tuning/schedule_search.h"

namespace opara {

std::vector<CpuShape> cpu_shape_candidates(int cores, int one_stream_threads, int uncapped_streams) {
  std::vector<CpuShape> shapes = {{1, std::max(1, one_stream_threads)}};
  if (cores < 2 || uncapped_streams < 2) return shapes;
  shapes.push_back({0, 1});
  // Powers of two keep a many-core machine's list short; a cap at or past the stream count plans
  // the uncapped plan again.
  for (int cap = 2; cap < std::min(cores, uncapped_streams); cap *= 2) shapes.push_back({cap, 1});
  if (cores < uncapped_streams) shapes.push_back({cores, 1});
  if (const int shared = cores / uncapped_streams; shared >= 2) shapes.push_back({0, shared});
  return shapes;
}

namespace {

struct Candidate {
  CpuTuningCandidate report;
  std::unique_ptr<CpuParallelExecutor> executor;
  double plan_us = 0;
  std::vector<double> warmup_ms;
};

// Each run starts from the inputs as given: what a run writes in place is put back, untimed, so
// that dozens of runs do not drift them (towards denormals, say, which time differently).
std::vector<double> time_runs(CpuParallelExecutor& executor, const std::vector<c10::IValue>& inputs,
                              const UndoWrites& writes, int runs) {
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(std::max(runs, 0)));
  for (int i = 0; i < runs; ++i) {
    const auto started = std::chrono::steady_clock::now();
    executor.run(inputs);
    samples.push_back(milliseconds_since(started));
    writes.undo();
  }
  return samples;
}

// Each node's median time over `runs` more runs of `executor` (one run's times are noisy: a
// 5 us node sometimes takes 50).
NodeTimes median_node_times(CpuParallelExecutor& executor, const std::vector<c10::IValue>& inputs,
                            const UndoWrites& writes, int runs) {
  std::vector<NodeTimes> samples;  // by run
  executor.record_node_times(true);
  for (int i = 0; i < runs; ++i) {
    executor.run(inputs);
    writes.undo();
    samples.push_back(executor.node_times());
  }
  executor.record_node_times(false);
  NodeTimes medians(samples.front().size());
  std::vector<double> node_samples;
  for (std::size_t node = 0; node < medians.size(); ++node) {
    node_samples.clear();
    for (const NodeTimes& times : samples) node_samples.push_back(times[node]);
    medians[node] = percentile(node_samples, 0.5);
  }
  return medians;
}

// Note [Searched priorities]: the candidate's plan again, with priorities searched on a replay of
// its node times, when the replay says they are worth timing; warmed up like the others.
// `executor_options`: the candidate's own.
std::optional<Candidate> with_searched_priorities(const Graph& graph, const Candidate& candidate,
                                                  CpuExecutorOptions executor_options,
                                                  const std::vector<c10::IValue>& inputs, const UndoWrites& writes,
                                                  const CpuTuningOptions& tuning) {
  CpuParallelExecutor& executor = *candidate.executor;
  // With no more streams than workers every ready stream gets a free worker at once: priorities
  // cannot change when anything runs, and the search runs would be wasted.
  if (tuning.search_iterations <= 0 || executor.workers() < 2 || executor.plan().stream_count <= executor.workers()) {
    return std::nullopt;
  }
  const std::vector<NodeTimes> node_times = {
      median_node_times(executor, inputs, writes, std::max(1, tuning.search_runs))};
  PrioritySearchOptions options;
  options.iterations = tuning.search_iterations;
  options.budget_ms = tuning.search_budget_ms;
  PrioritySearch search =
      search_priorities(executor.plan(), node_times, executor_options.priorities, executor.workers(), options);
  if (search.start_us < search.best_us * tuning.min_replay_gain) return std::nullopt;
  Candidate searched;
  searched.report = candidate.report;
  searched.report.searched_priorities = true;
  searched.report.replay_speedup = search.start_us / search.best_us;
  searched.plan_us = candidate.plan_us;
  executor_options.priorities = std::move(search.priorities);
  searched.executor = std::make_unique<CpuParallelExecutor>(graph, executor.plan(), std::move(executor_options));
  searched.warmup_ms = time_runs(*searched.executor, inputs, writes, static_cast<int>(candidate.warmup_ms.size()));
  return searched;
}

// What every candidate is planned from and run on.
struct TuningContext {
  const Graph& graph;
  PlanOptions plan_options;
  const std::vector<NodeCost>& costs;
  const std::vector<c10::IValue>& inputs;
  const UndoWrites& writes;
  const CpuTuningOptions& tuning;
};

struct TimedPlan {
  Plan plan;
  double plan_us = 0;
};

TimedPlan timed_plan(const TuningContext& context, int cap) {
  PlanOptions options = context.plan_options;
  options.max_streams = cap;
  const auto planning = std::chrono::steady_clock::now();
  TimedPlan planned{make_plan(context.graph, options, context.costs)};
  planned.plan_us = milliseconds_since(planning) * 1000;
  return planned;
}

// Every shape planned (the uncapped plan reused), run on an executor of its own and warmed up,
// each followed by its candidate with searched priorities where the search pays. A shape that
// plans the same streams as one before it is dropped: a cap can merge streams into the same plan
// as a smaller cap or none.
std::vector<Candidate> warmed_up_candidates(const TuningContext& context, const std::vector<CpuShape>& shapes,
                                            const TimedPlan& uncapped, CpuExecutorOptions executor_options) {
  std::vector<Candidate> candidates;
  for (const CpuShape& shape : shapes) {
    TimedPlan planned = shape.max_streams == 0 ? uncapped : timed_plan(context, shape.max_streams);
    const bool planned_before = std::any_of(candidates.begin(), candidates.end(), [&](const Candidate& other) {
      return other.report.shape.intra_op_threads == shape.intra_op_threads &&
             other.executor->plan().stream_of == planned.plan.stream_of;
    });
    if (planned_before) continue;
    Candidate& candidate = candidates.emplace_back();
    candidate.report.shape = shape;
    candidate.report.streams = planned.plan.stream_count;
    candidate.plan_us = planned.plan_us;
    executor_options.cpu.intra_op_threads = shape.intra_op_threads;
    candidate.executor =
        std::make_unique<CpuParallelExecutor>(context.graph, std::move(planned.plan), executor_options);
    // Warm-up: the first candidate also warms the process (allocator, ATen's kernels).
    candidate.warmup_ms =
        time_runs(*candidate.executor, context.inputs, context.writes, std::max(1, context.tuning.warmup_runs));
    if (std::optional<Candidate> searched = with_searched_priorities(context.graph, candidate, executor_options,
                                                                     context.inputs, context.writes, context.tuning)) {
      candidates.push_back(std::move(*searched));
    }
  }
  return candidates;
}

// Times the candidates in interleaved rounds within the budget, after the rounds `times` holds
// already: each one's median and speedup over the first, of all the rounds.
RoundsAndRuns time_candidates(std::vector<Candidate>& candidates, const TuningContext& context, RoundTimes& times) {
  double run_ms = 0;
  for (const Candidate& candidate : candidates) run_ms = std::max(run_ms, candidate.warmup_ms.back());
  const CpuTuningOptions& tuning = context.tuning;
  const RoundsAndRuns budget =
      within_budget(tuning.rounds, tuning.runs, tuning.budget_ms, tuning.settle, candidates.size(), run_ms);
  std::vector<BlockTimer> timers;
  for (Candidate& candidate : candidates) {
    timers.push_back([&candidate, &context](int runs) {
      return time_runs(*candidate.executor, context.inputs, context.writes, runs);
    });
  }
  times.append(time_in_rounds(timers, budget.rounds, budget.rounds * budget.runs, Settle{1, context.tuning.settle}));
  for (std::size_t k = 0; k < candidates.size(); ++k) {
    candidates[k].report.median_ms = percentile(times.all(k), 0.5);
    candidates[k].report.speedup = k == 0 ? 1.0 : times.speedup(k, 0);
  }
  return budget;
}

std::vector<MeasuredCandidate> measured(const std::vector<Candidate>& candidates) {
  std::vector<MeasuredCandidate> measured;
  for (const Candidate& candidate : candidates)
    measured.push_back({candidate.report.median_ms, candidate.report.speedup});
  return measured;
}

}  // namespace

CpuTuning tune_cpu_executor(const Graph& graph, PlanOptions plan_options, const std::vector<NodeCost>& costs,
                            const std::vector<c10::IValue>& inputs, CpuExecutorOptions executor_options,
                            const CpuTuningOptions& tuning) {
  const auto started = std::chrono::steady_clock::now();
  const UndoWrites writes(inputs, inputs_written_in_place(graph));
  const TuningContext context{graph, plan_options, costs, inputs, writes, tuning};
  const int cores = usable_cores();
  const int requested_threads = executor_options.cpu.intra_op_threads;
  const int one_stream_threads = requested_threads > 0 ? requested_threads : std::min(at::get_num_threads(), cores);
  const TimedPlan uncapped = timed_plan(context, 0);
  const std::vector<CpuShape> shapes =
      plan_options.streams == StreamPolicy::kSingle
          ? std::vector<CpuShape>{{1, one_stream_threads}}
          : cpu_shape_candidates(cores, one_stream_threads, uncapped.plan.stream_count);
  std::vector<Candidate> candidates = warmed_up_candidates(context, shapes, uncapped, std::move(executor_options));

  CpuTuning result;
  if (candidates.size() > 1) {
    RoundTimes times;
    const RoundsAndRuns budget = time_candidates(candidates, context, times);
    result.rounds = budget.rounds;
    result.runs_per_round = budget.runs;
    if (measures_disagree(measured(candidates), tuning.min_speedup)) {  // undecided: once more, rounds pooled
      result.rounds += time_candidates(candidates, context, times).rounds;
      result.timed_again = true;
    }
    result.chosen = kept_candidate(measured(candidates), tuning.min_speedup);
  } else {
    candidates.front().report.median_ms = percentile(candidates.front().warmup_ms, 0.5);
  }
  for (const Candidate& candidate : candidates) result.candidates.push_back(candidate.report);
  result.plan_us = candidates[result.chosen].plan_us;
  result.executor = std::move(candidates[result.chosen].executor);
  result.tuning_ms = milliseconds_since(started);
  return result;
}

}  // namespace opara
