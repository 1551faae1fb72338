#include "compile/cuda_capture.h"

#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "exec/undo_writes.h"
#include "opara/error.h"
#include "overflow/cpu_steps.h"
#include "runtime/cuda/replay_timing.h"
#include "schedule/pool_estimate.h"
#include "support/elapsed.h"
#include "support/percentile.h"
#include "tuning/measured_choice.h"
#include "tuning/round_timing.h"

namespace opara {

namespace {

// MemoryProtection::kSmallerPool's choice: keep-alive only when its pool is smaller, since
// record-stream frees each tensor earlier (a tie keeps that).
MemoryProtection smaller_pool(std::size_t record_stream_bytes, std::size_t keep_alive_bytes) {
  return keep_alive_bytes < record_stream_bytes ? MemoryProtection::kKeepAlive : MemoryProtection::kRecordStream;
}

// Rounds and runs per round of the candidates' timing at most (the budget cuts them).
constexpr int kRounds = 5;
constexpr int kRunsPerRound = 20;

// Captures the model with `memory` and `plan`; a node that fails capture becomes a host node and
// the model is captured again. Into the named pool unless `own_pool`, else a pool of its own.
CapturedModel capture_model(CaptureRequest& request, MemoryProtection memory, const PlanOptions& plan, bool own_pool) {
  CudaOptions attempt = request.options.cuda;
  attempt.memory = memory;
  const bool overlap = request.options.overflow.policy != OverflowPolicy::kNone;
  for (;;) {
    std::vector<Placement> placement = runnable_placement(request.graph, request.chosen, request.uncapturable);
    try {
      std::shared_ptr<CapturePool> pool =
          request.named_pool && !own_pool ? request.named_pool : CapturePool::create(request.device.index());
      // In the pool's turn: the warm-ups, captures and the replay that fills the outputs use the
      // pool's memory and cuBLAS workspaces, which the models already in it use while they run.
      std::unique_ptr<CudaModel> model;
      pool->run_in_turn([&] {
        model = std::make_unique<CudaModel>(request.graph, placement, overlap, request.costs, request.examples,
                                            request.read_where_they_are, plan, attempt, pool);
      });
      return {std::move(model), std::move(placement)};
    } catch (const CaptureError& error) {
      if (attempt.on_uncapturable == CudaOptions::OnUncapturable::kError || request.uncapturable[error.node()]) throw;
      request.uncapturable[error.node()] = true;
    }
  }
}

std::size_t pool_bytes(const CudaModel& model) {
  CompiledStats stats;
  model.add_stats(stats);
  return stats.pool_bytes;
}

// MemoryProtection::kSmallerPool: captures both ways and keeps the smaller pool.
CapturedModel capture_smaller_pool(CaptureRequest& request, const PlanOptions& plan, CompiledStats& stats) {
  if (request.named_pool) {
    throw Error(
        fmt::format("{}: memory=smaller-pool keeps one of two captures and releases the other's pool, which "
                    "a shared memory_pool cannot do; choose record-stream or keep-alive",
                    request.graph.source_path));
  }
  CapturedModel record_stream = capture_model(request, MemoryProtection::kRecordStream, plan, false);
  CapturedModel keep_alive = capture_model(request, MemoryProtection::kKeepAlive, plan, false);
  stats.pool_bytes_record_stream = pool_bytes(*record_stream.model);
  stats.pool_bytes_keep_alive = pool_bytes(*keep_alive.model);
  stats.memory = smaller_pool(stats.pool_bytes_record_stream, stats.pool_bytes_keep_alive);
  CapturedModel kept = std::move(stats.memory == MemoryProtection::kKeepAlive ? keep_alive : record_stream);
  record_stream.model.reset();
  keep_alive.model.reset();
  // The caching allocator keeps a released graph pool's memory until it empties its cache.
  c10::cuda::CUDACachingAllocator::emptyCache();
  return kept;
}

CapturedModel capture_as_asked(CaptureRequest& request, const PlanOptions& plan, CompiledStats& stats) {
  if (request.options.cuda.memory == MemoryProtection::kSmallerPool) return capture_smaller_pool(request, plan, stats);
  stats.memory = request.options.cuda.memory;
  return capture_model(request, request.options.cuda.memory, plan, false);
}

CaptureHold hold_of(MemoryProtection memory) {
  return memory == MemoryProtection::kKeepAlive ? CaptureHold::kKeepAlive : CaptureHold::kRecordStream;
}

// The cuBLAS workspace LibTorch gives each stream that runs a product (CUBLAS_WORKSPACE_CONFIG,
// else its default for the device: 32 MiB on Hopper).
std::size_t blas_workspace_bytes() {
  return at::cuda::getChosenWorkspaceSize();
}

// What the plan of `options` is estimated to hold before capture: its pool (0 without recorded
// shapes) and its cuBLAS workspaces, from one plan.
struct HeldEstimate {
  std::size_t pool_bytes = 0;
  std::size_t workspace_bytes = 0;
};

HeldEstimate held_estimate(const CaptureRequest& request, const PlanOptions& options) {
  const Plan plan = make_plan(request.graph, options, request.costs);
  HeldEstimate held;
  if (!request.shapes.empty()) {
    held.pool_bytes =
        estimate_pool(request.graph, plan, request.shapes, hold_of(request.options.cuda.memory)).pool_bytes;
  }
  held.workspace_bytes = estimate_blas_workspaces(request.graph, plan, blas_workspace_bytes());
  return held;
}

// The options' plan, streams that cannot pay for their events merged, its streams capped until its pool estimate fits
// the memory budget when the caller left them free (a plan of one stream, or no shapes, stays as it is).
PlanOptions plan_within_budget(const CaptureRequest& request, CompiledStats& stats) {
  PlanOptions plan = request.options.plan;
  plan.payoff = request.payoff;
  if (request.shapes.empty()) return plan;
  const BudgetFit fit =
      fit_to_budget(request.graph, plan, request.costs, request.shapes, request.options.cuda.memory_budget,
                    hold_of(request.options.cuda.memory), blas_workspace_bytes());
  stats.sequential_pool_estimate_bytes = fit.sequential_estimate_bytes;
  if (!fit.applies) return plan;
  stats.memory_budget_bytes = fit.budget_bytes;
  plan.max_streams = fit.stream_cap;
  stats.budget_stream_cap = fit.stream_cap;
  return plan;
}

// The caps worth measuring for `plan` (the plan within the budget): none (capture as asked)
// unless measuring is on, the caller's streams free and the plan of several streams; the plan's
// own cap stands for "no cap" of cuda_stream_caps.
std::vector<int> measured_caps(const CaptureRequest& request, const PlanOptions& plan) {
  const Options& options = request.options;
  if (options.cuda.measure_ms <= 0 || options.plan.max_streams != 0 || options.plan.streams == StreamPolicy::kSingle) {
    return {};
  }
  std::vector<int> caps = cuda_stream_caps(make_plan(request.graph, plan, request.costs).stream_count);
  if (caps.size() <= 1) return {};
  caps.back() = plan.max_streams;
  return caps;
}

struct Candidate {
  CudaCandidate report;
  CapturedModel captured;
};

// Times the candidates within the budget in interleaved rounds, each replay from the inputs as
// they were before the first (what a replay writes is put back, untimed): medians and speedups
// over the first.
void time_candidates(std::vector<Candidate>& candidates, const CaptureRequest& request) {
  const UndoWrites writes(std::vector<c10::IValue>(request.examples.begin(), request.examples.end()), request.written);
  const auto put_back = [&writes] { writes.undo(); };
  std::vector<std::size_t> timed;  // the candidates within the budget, by index
  for (std::size_t k = 0; k < candidates.size(); ++k) {
    if (!candidates[k].report.over_budget) timed.push_back(k);
  }
  double run_ms = 0;
  for (std::size_t k : timed) {
    const std::vector<double> warm = time_replays(*candidates[k].captured.model, request.examples, put_back, 2);
    run_ms = std::max(run_ms, warm.back());
  }
  const RoundsAndRuns budget = within_budget(kRounds, kRunsPerRound, request.options.cuda.measure_ms,
                                             std::chrono::milliseconds(0), timed.size(), run_ms);
  std::vector<BlockTimer> timers;
  for (std::size_t k : timed) {
    timers.push_back(
        [&, k](int runs) { return time_replays(*candidates[k].captured.model, request.examples, put_back, runs); });
  }
  const RoundTimes times = time_in_rounds(timers, budget.rounds, budget.rounds * budget.runs, Settle{1, {}});
  for (std::size_t t = 0; t < timed.size(); ++t) {
    CudaCandidate& report = candidates[timed[t]].report;
    report.median_ms = percentile(times.all(t), 0.5);
    report.speedup = t == 0 ? 1.0 : times.speedup(t, 0);
  }
  put_back();
}

CapturedModel capture_measured(CaptureRequest& request, const PlanOptions& base, const std::vector<int>& caps,
                               CompiledStats& stats) {
  const auto started = std::chrono::steady_clock::now();
  const Options& options = request.options;
  // Candidates are captured with the protection asked (record-stream for smaller-pool, which
  // captures the kept plan both ways afterwards).
  const MemoryProtection memory =
      options.cuda.memory == MemoryProtection::kSmallerPool ? MemoryProtection::kRecordStream : options.cuda.memory;
  std::vector<Candidate> candidates;
  const auto reports = [&candidates] {
    std::vector<CudaCandidate> captured;
    for (const Candidate& candidate : candidates) captured.push_back(candidate.report);
    return captured;
  };
  const auto add_candidate = [&](int cap) {
    PlanOptions plan = base;
    plan.max_streams = cap;
    Candidate& candidate = candidates.emplace_back();
    candidate.captured = capture_model(request, memory, plan, /*own_pool=*/true);
    CompiledStats captured;
    candidate.captured.model->add_stats(captured);
    candidate.report.max_streams = cap;
    candidate.report.streams = captured.streams;
    candidate.report.pool_bytes = captured.pool_bytes;
    candidate.report.workspace_bytes = captured.workspace_bytes;
    const HeldEstimate held = held_estimate(request, plan);
    candidate.report.pool_estimate_bytes = held.pool_bytes;
    candidate.report.workspace_estimate_bytes = held.workspace_bytes;
    if (candidates.size() == 1) {  // the sequential graph: the budget is of what it holds
      stats.memory_budget_bytes =
          budget_bytes(options.cuda.memory_budget, candidate.report.pool_bytes + candidate.report.workspace_bytes);
    } else if (over_budget(candidate.report, stats.memory_budget_bytes)) {
      // Dropped at once: its pool is not held while the others are captured and timed.
      candidate.report.over_budget = true;
      candidate.captured.model.reset();
      c10::cuda::CUDACachingAllocator::emptyCache();
    }
  };
  for (int cap : caps) add_candidate(cap);
  // Every candidate of several streams over the budget: fewer streams, until some fit.
  for (int cap = smaller_cap_within_budget(reports()); cap != 0; cap = smaller_cap_within_budget(reports())) {
    add_candidate(cap);
  }
  // The plan stays the last candidate, where stats() and opara-bench list it.
  std::rotate(candidates.begin() + static_cast<std::ptrdiff_t>(caps.size()) - 1,
              candidates.begin() + static_cast<std::ptrdiff_t>(caps.size()), candidates.end());
  time_candidates(candidates, request);
  std::vector<MeasuredCandidate> measured;
  for (const Candidate& candidate : candidates) {
    measured.push_back({candidate.report.median_ms, candidate.report.speedup, !candidate.report.over_budget});
  }
  stats.candidate_chosen = kept_candidate(measured, kClearlyFaster);
  CapturedModel kept = std::move(candidates[stats.candidate_chosen].captured);
  for (Candidate& candidate : candidates) {
    stats.candidates.push_back(candidate.report);
    candidate.captured.model.reset();
  }
  const bool again = request.named_pool || options.cuda.memory == MemoryProtection::kSmallerPool;
  if (again) kept.model.reset();
  // The caching allocator keeps a released graph pool's memory until it empties its cache.
  c10::cuda::CUDACachingAllocator::emptyCache();
  if (again) {
    PlanOptions plan = base;
    plan.max_streams = stats.candidates[stats.candidate_chosen].max_streams;
    kept = capture_as_asked(request, plan, stats);
  } else {
    stats.memory = memory;
  }
  stats.measure_ms = milliseconds_since(started);
  return kept;
}

}  // namespace

CapturedModel capture_cuda_model(CaptureRequest& request, CompiledStats& stats) {
  const PlanOptions plan = plan_within_budget(request, stats);
  const std::vector<int> caps = measured_caps(request, plan);
  CapturedModel captured =
      caps.empty() ? capture_as_asked(request, plan, stats) : capture_measured(request, plan, caps, stats);
  if (!caps.empty()) {
    stats.pool_estimate_bytes = stats.candidates[stats.candidate_chosen].pool_estimate_bytes;
    stats.workspace_estimate_bytes = stats.candidates[stats.candidate_chosen].workspace_estimate_bytes;
  } else {
    const HeldEstimate held = held_estimate(request, plan);
    stats.pool_estimate_bytes = held.pool_bytes;
    stats.workspace_estimate_bytes = held.workspace_bytes;
  }
  return captured;
}

}  // namespace opara
