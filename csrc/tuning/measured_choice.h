#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

#include "opara/graph.h"
#include "opara/options.h"
#include "opara/plan.h"
#include "schedule/pool_estimate.h"

namespace opara {

// Choosing among measured candidates: the rule the CPU tuner (cpu_tuning.h) and CUDA's captured
// candidates (CudaOptions::measure_ms) share. The first candidate is the baseline, the schedule
// that never loses much (eager's on the CPU, the sequential graph on CUDA): another replaces it
// only when clearly faster, since on a machine whose speed drifts a candidate that is only a
// little faster is as often a little slower.

struct MeasuredCandidate {
  double median_ms = 0;  // of all its timed runs
  double speedup = 1;    // over the first: the median over rounds of the ratio within a round
  bool allowed = true;   // false: out of the running (a CUDA pool over the memory budget)
};

// The first stays unless an allowed candidate is at least `min_speedup` faster both by its ratios
// within rounds and by its median time (either alone, on a machine whose speed drifts, picks a
// slower schedule now and then); of those, the fastest by its ratios.
std::size_t kept_candidate(const std::vector<MeasuredCandidate>& candidates, double min_speedup);

// Whether an allowed candidate is clearly faster by one measure and not by the other, so that the
// timings do not decide between it and the baseline: timed again, with the rounds pooled, they
// may (the CPU tuner's multihead_rnn: 1.31x within rounds, its median above eager's, so eager's
// schedule stayed at 0.97x where two streams ran 1.4x).
bool measures_disagree(const std::vector<MeasuredCandidate>& candidates, double min_speedup);

// What both tuners keep unless clearly beaten: 3% (CpuTuningOptions::min_speedup's default).
inline constexpr double kClearlyFaster = 1.03;

struct RoundsAndRuns {
  int rounds;
  int runs;  // per round
};

// Runs per round, then rounds, cut until `candidates` blocks a round of `runs` runs of `run_ms`,
// each block settling first for `settle` (at least one run), fit `budget_ms`; never below
// min(3, rounds) rounds of one run. budget_ms or run_ms 0: `rounds` of `runs`.
RoundsAndRuns within_budget(int rounds, int runs, double budget_ms, std::chrono::milliseconds settle,
                            std::size_t candidates, double run_ms);

// CUDA: the caps (PlanOptions::max_streams) of the candidates for a plan of `uncapped_streams`
// streams: the sequential graph (1) first, then the plan capped at half its streams (at least 2)
// where that is fewer than it opens, then the plan (0: no cap). A plan of one stream: {1} alone.
std::vector<int> cuda_stream_caps(int uncapped_streams);

// CUDA: the cap to capture next when every candidate of several streams measured so far (`measured`,
// their reports) had a pool over the memory budget: half the streams of the smallest of them, or
// one fewer from 4 streams down (each stream there is a large share of the speedup), where no
// candidate was capped there yet; 0: none left to try (down to 2), or one of several streams fits.
// The estimate ranks the caps, the measured pool decides (the first H200 run: GoogLeNet's plan of
// 28 streams took 240 MiB against an estimate of 80, its half 94 MiB on 4 streams against a budget
// of 88, and fewer streams, 1.3x faster on 2, were never tried).
int smaller_cap_within_budget(const std::vector<CudaCandidate>& measured);

// The bytes a plan's graphs may hold, their pool and their cuBLAS workspaces together: the budget's
// bytes when given, else its ratio times what the sequential graph holds, and at least that plus
// the budget's headroom. The workspaces count: on the GPU runs they were most of what a plan
// of many streams held (32 MiB a stream on Hopper), and a budget of the pool alone let a plan hold
// many times the sequential graph's memory.
std::size_t budget_bytes(const MemoryBudget& budget, std::size_t sequential_held_bytes);

// Whether a captured candidate holds more than `budget` (budget_bytes): its pool and its workspaces.
bool over_budget(const CudaCandidate& candidate, std::size_t budget);

// What the memory budget makes of `plan` before anything is captured, from the estimates
// (schedule/pool_estimate.h) with `blas_workspace_bytes` a stream that runs cuBLAS: the sequential
// graph's pool and workspaces, the budget's bytes of them, and, when the caller left the streams
// free (`applies`: no max_streams, not one stream), the cap under which the plan's estimate fits
// (0: none needed). compile() on CUDA and `opara-bench plan` both ask it.
struct BudgetFit {
  std::size_t sequential_estimate_bytes = 0;            // its pool
  std::size_t sequential_workspace_estimate_bytes = 0;  // its cuBLAS workspaces
  std::size_t budget_bytes = 0;
  bool applies = false;
  int stream_cap = 0;
};
BudgetFit fit_to_budget(const Graph& graph, const PlanOptions& plan, const std::vector<NodeCost>& costs,
                        const std::vector<NodeShapes>& shapes, const MemoryBudget& budget, CaptureHold hold,
                        std::size_t blas_workspace_bytes);

}  // namespace opara
