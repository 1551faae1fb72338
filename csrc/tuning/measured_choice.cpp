#include "tuning/measured_choice.h"

#include <algorithm>
#include <cmath>

namespace opara {

namespace {

// The two measures of "clearly faster" than the baseline (the first candidate).
bool faster_by_ratios(const MeasuredCandidate& candidate, double min_speedup) {
  return candidate.speedup >= min_speedup;
}
bool faster_by_median(const MeasuredCandidate& candidate, const MeasuredCandidate& baseline, double min_speedup) {
  return candidate.median_ms * min_speedup <= baseline.median_ms;
}

}  // namespace

std::size_t kept_candidate(const std::vector<MeasuredCandidate>& candidates, double min_speedup) {
  std::size_t chosen = 0;
  for (std::size_t k = 1; k < candidates.size(); ++k) {
    const MeasuredCandidate& candidate = candidates[k];
    const bool clearly_faster =
        faster_by_ratios(candidate, min_speedup) && faster_by_median(candidate, candidates.front(), min_speedup);
    if (candidate.allowed && clearly_faster && candidate.speedup > candidates[chosen].speedup) chosen = k;
  }
  return chosen;
}

bool measures_disagree(const std::vector<MeasuredCandidate>& candidates, double min_speedup) {
  if (candidates.empty()) return false;
  return std::any_of(candidates.begin() + 1, candidates.end(), [&](const MeasuredCandidate& candidate) {
    return candidate.allowed &&
           faster_by_ratios(candidate, min_speedup) != faster_by_median(candidate, candidates.front(), min_speedup);
  });
}

RoundsAndRuns within_budget(int rounds, int runs, double budget_ms, std::chrono::milliseconds settle,
                            std::size_t candidates, double run_ms) {
  rounds = std::max(1, rounds);
  const int most = std::max(1, runs);
  if (budget_ms <= 0 || run_ms <= 0) return {rounds, most};
  const double count = static_cast<double>(std::max<std::size_t>(candidates, 1));
  const double settle_ms = std::max(static_cast<double>(settle.count()), run_ms);
  const double affordable = std::floor((budget_ms / (rounds * count) - settle_ms) / run_ms);
  if (affordable >= 1) return {rounds, affordable >= most ? most : static_cast<int>(affordable)};
  const double affordable_rounds = std::floor(budget_ms / (count * (settle_ms + run_ms)));
  const int fewest = std::min(3, rounds);
  return {affordable_rounds <= fewest ? fewest : static_cast<int>(affordable_rounds), 1};
}

std::vector<int> cuda_stream_caps(int uncapped_streams) {
  std::vector<int> caps = {1};
  if (uncapped_streams < 2) return caps;
  if (const int half = std::max(2, uncapped_streams / 2); half < uncapped_streams) caps.push_back(half);
  caps.push_back(0);
  return caps;
}

int smaller_cap_within_budget(const std::vector<CudaCandidate>& measured) {
  int smallest_over = 0;
  for (const CudaCandidate& candidate : measured) {
    if (candidate.streams < 2) continue;
    if (!candidate.over_budget) return 0;
    if (smallest_over == 0 || candidate.streams < smallest_over) smallest_over = candidate.streams;
  }
  if (smallest_over <= 2) return 0;
  const int cap = smallest_over <= 4 ? smallest_over - 1 : smallest_over / 2;
  const bool tried = std::any_of(measured.begin(), measured.end(),
                                 [cap](const CudaCandidate& candidate) { return candidate.max_streams == cap; });
  return tried ? 0 : cap;
}

std::size_t budget_bytes(const MemoryBudget& budget, std::size_t sequential_held_bytes) {
  if (budget.bytes > 0) return budget.bytes;
  const auto scaled = static_cast<std::size_t>(std::ceil(budget.ratio * static_cast<double>(sequential_held_bytes)));
  return std::max(scaled, sequential_held_bytes + budget.headroom_bytes);
}

bool over_budget(const CudaCandidate& candidate, std::size_t budget) {
  return candidate.pool_bytes + candidate.workspace_bytes > budget;
}

BudgetFit fit_to_budget(const Graph& graph, const PlanOptions& plan, const std::vector<NodeCost>& costs,
                        const std::vector<NodeShapes>& shapes, const MemoryBudget& budget, CaptureHold hold,
                        std::size_t blas_workspace_bytes) {
  PlanOptions sequential = plan;
  sequential.streams = StreamPolicy::kSingle;
  const Plan one_stream = make_plan(graph, sequential, costs);
  BudgetFit fit;
  fit.sequential_estimate_bytes = estimate_pool(graph, one_stream, shapes, hold).pool_bytes;
  fit.sequential_workspace_estimate_bytes = estimate_blas_workspaces(graph, one_stream, blas_workspace_bytes);
  fit.budget_bytes = budget_bytes(budget, fit.sequential_estimate_bytes + fit.sequential_workspace_estimate_bytes);
  fit.applies = plan.max_streams == 0 && plan.streams != StreamPolicy::kSingle;
  if (fit.applies) {
    fit.stream_cap = stream_cap_within(graph, plan, costs, shapes, fit.budget_bytes, hold, blas_workspace_bytes);
  }
  return fit;
}

}  // namespace opara
