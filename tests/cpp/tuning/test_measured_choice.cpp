// The rule both tuners choose by, on injected timings: the baseline (first) stays unless another
// candidate is clearly faster by its ratios within rounds and by its median; a candidate out of
// the running (a CUDA pool over budget) is never kept; the budget cuts runs, then rounds.
#include <gtest/gtest.h>

#include <vector>

#include "support/percentile.h"
#include "tuning/measured_choice.h"
#include "tuning/round_timing.h"

namespace opara {
namespace {

// Candidates timed in rounds by runners whose run takes `ms[runner][round]` (every run of a
// block alike), then measured as the tuners measure them.
std::vector<MeasuredCandidate> measured(const std::vector<std::vector<double>>& ms) {
  const std::size_t rounds = ms.front().size();
  std::vector<std::size_t> blocks(ms.size(), 0);
  std::vector<BlockTimer> timers;
  for (std::size_t k = 0; k < ms.size(); ++k) {
    timers.push_back([&ms, &blocks, k](int runs) {
      // A block is settling (1 run) then timing: the round is every second block.
      const std::size_t round = blocks[k]++ / 2;
      return std::vector<double>(static_cast<std::size_t>(runs), ms[k][round]);
    });
  }
  const RoundTimes times = time_in_rounds(timers, static_cast<int>(rounds), static_cast<int>(rounds) * 4,
                                          Settle{1, std::chrono::milliseconds(0)});
  std::vector<MeasuredCandidate> candidates;
  for (std::size_t k = 0; k < ms.size(); ++k) {
    candidates.push_back({percentile(times.all(k), 0.5), k == 0 ? 1.0 : times.speedup(k, 0)});
  }
  return candidates;
}

TEST(MeasuredChoice, TheBaselineStaysUnlessAnotherIsClearlyFaster) {
  // 2% faster in every round: within noise, the sequential graph stays.
  EXPECT_EQ(kept_candidate(measured({{10, 10, 10}, {9.8, 9.8, 9.8}}), kClearlyFaster), 0u);
  // 20% faster in every round: kept.
  EXPECT_EQ(kept_candidate(measured({{10, 10, 10}, {8, 8, 8}}), kClearlyFaster), 1u);
  // Of two clearly faster ones, the faster by ratios within rounds.
  EXPECT_EQ(kept_candidate(measured({{10, 10, 10}, {8, 8, 8}, {7, 7, 7}}), kClearlyFaster), 2u);
  // Slower than the baseline: never kept.
  EXPECT_EQ(kept_candidate(measured({{10, 10, 10}, {12, 12, 12}}), kClearlyFaster), 0u);
}

TEST(MeasuredChoice, BothMeasuresMustAgree) {
  // A slow minute of the machine during the baseline's blocks: its median looks 40% slower, the
  // ratios within rounds say 1%. Stays.
  EXPECT_EQ(kept_candidate({{10, 1}, {6, 1.01}}, kClearlyFaster), 0u);
  // Faster by its ratios, its median no faster than the baseline's: stays.
  EXPECT_EQ(kept_candidate({{10, 1}, {10.1, 1.2}}, kClearlyFaster), 0u);
  // A slow round for everyone changes neither.
  EXPECT_EQ(kept_candidate(measured({{10, 20, 20, 10, 10}, {8, 16, 16, 8, 8}}), kClearlyFaster), 1u);
}

TEST(MeasuredChoice, TheMeasuresDisagreeWhereOneAloneSaysClearlyFaster) {
  // Clearly faster by its median only, or by its ratios only: undecided, to be timed again.
  EXPECT_TRUE(measures_disagree({{10, 1}, {6, 1.01}}, kClearlyFaster));
  EXPECT_TRUE(measures_disagree({{10, 1}, {10.1, 1.2}}, kClearlyFaster));
  // Both say so, or neither: decided.
  EXPECT_FALSE(measures_disagree(measured({{10, 10, 10}, {8, 8, 8}}), kClearlyFaster));
  EXPECT_FALSE(measures_disagree(measured({{10, 10, 10}, {9.9, 9.9, 9.9}}), kClearlyFaster));
  // One undecided candidate among decided ones is enough; one out of the running never counts.
  EXPECT_TRUE(measures_disagree({{10, 1}, {8, 1.25}, {10.1, 1.2}}, kClearlyFaster));
  EXPECT_FALSE(measures_disagree({{10, 1}, {10.1, 1.2, false}}, kClearlyFaster));
  EXPECT_FALSE(measures_disagree({}, kClearlyFaster));
}

TEST(MeasuredChoice, ACandidateOutOfTheRunningIsNeverKept) {
  std::vector<MeasuredCandidate> candidates = measured({{10, 10, 10}, {8, 8, 8}, {6, 6, 6}});
  candidates[2].allowed = false;  // the fastest's pool is over the memory budget
  EXPECT_EQ(kept_candidate(candidates, kClearlyFaster), 1u);
  candidates[1].allowed = false;
  EXPECT_EQ(kept_candidate(candidates, kClearlyFaster), 0u);
  EXPECT_EQ(kept_candidate({}, kClearlyFaster), 0u);
}

TEST(MeasuredChoice, TheBudgetCutsRunsThenRoundsButNeverToNone) {
  using std::chrono::milliseconds;
  // No budget, or nothing measured yet: as asked.
  EXPECT_EQ(within_budget(5, 10, 0, milliseconds(20), 3, 1.0).runs, 10);
  EXPECT_EQ(within_budget(5, 10, 100, milliseconds(20), 3, 0).rounds, 5);
  // 3 candidates x 5 rounds x (20 ms settling + runs of 1 ms) in 600 ms: 20 runs fit, capped at 10.
  const RoundsAndRuns roomy = within_budget(5, 10, 600, milliseconds(20), 3, 1.0);
  EXPECT_EQ(roomy.rounds, 5);
  EXPECT_EQ(roomy.runs, 10);
  // In 400 ms: 40 / 15 - 20 = 6 runs of 1 ms each round.
  EXPECT_EQ(within_budget(5, 10, 400, milliseconds(20), 3, 1.0).runs, 6);
  // Runs of 50 ms (settling takes one run): a round of one run each is 300 ms, 600 ms buys two
  // rounds, and three is the fewest.
  const RoundsAndRuns slow = within_budget(5, 10, 600, milliseconds(20), 3, 50);
  EXPECT_EQ(slow.rounds, 3);
  EXPECT_EQ(slow.runs, 1);
}

TEST(MeasuredChoice, CudaCandidatesAreTheSequentialGraphACapAndThePlan) {
  EXPECT_EQ(cuda_stream_caps(1), (std::vector<int>{1}));
  EXPECT_EQ(cuda_stream_caps(2), (std::vector<int>{1, 0}));
  EXPECT_EQ(cuda_stream_caps(3), (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(cuda_stream_caps(8), (std::vector<int>{1, 4, 0}));
  EXPECT_EQ(cuda_stream_caps(61), (std::vector<int>{1, 30, 0}));
}

CudaCandidate measured(int max_streams, int streams, bool over_budget) {
  CudaCandidate candidate;
  candidate.max_streams = max_streams;
  candidate.streams = streams;
  candidate.over_budget = over_budget;
  return candidate;
}

// The first H200 run's GoogLeNet: the plan (28 streams) and its half (capped at 14, 4 streams) both
// over the budget; then 3 streams are captured, then 2, and nothing more once some fit or at 2.
TEST(MeasuredChoice, CandidatesOverTheBudgetAreFollowedByFewerStreams) {
  std::vector<CudaCandidate> googlenet{measured(1, 1, false), measured(14, 4, true), measured(0, 28, true)};
  EXPECT_EQ(smaller_cap_within_budget(googlenet), 3);
  googlenet.push_back(measured(3, 3, true));
  EXPECT_EQ(smaller_cap_within_budget(googlenet), 2);
  googlenet.push_back(measured(2, 2, false));
  EXPECT_EQ(smaller_cap_within_budget(googlenet), 0) << "two streams fit";
  googlenet.back().over_budget = true;
  EXPECT_EQ(smaller_cap_within_budget(googlenet), 0) << "two streams over the budget: nothing fewer but one";
  EXPECT_EQ(smaller_cap_within_budget({measured(1, 1, false), measured(0, 9, true)}), 4) << "half, above 4";
  EXPECT_EQ(smaller_cap_within_budget({measured(1, 1, false), measured(4, 4, false), measured(0, 9, true)}), 0)
      << "a candidate of several streams fits: the measured choice has its alternative";
  EXPECT_EQ(smaller_cap_within_budget({measured(1, 1, false), measured(4, 6, true), measured(0, 9, true)}), 3)
      << "half the fewest streams over the budget, whatever cap gave them";
  EXPECT_EQ(smaller_cap_within_budget({measured(1, 1, false), measured(2, 3, true)}), 0) << "a cap already tried";
  EXPECT_EQ(smaller_cap_within_budget({measured(1, 1, false)}), 0);
}

TEST(MeasuredChoice, TheBudgetIsBytesOrARatioToWhatTheSequentialGraphHolds) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  EXPECT_EQ(budget_bytes(MemoryBudget{}, 1000 * kMiB), 1300 * kMiB) << "the default: 1.3x the sequential graph's";
  EXPECT_EQ(budget_bytes(MemoryBudget{}, 24 * kMiB), 88 * kMiB) << "and at least 64 MiB more";
  EXPECT_EQ(budget_bytes(MemoryBudget{1.3, 0, 0}, 1000), 1300u) << "a bare ratio";
  EXPECT_EQ(budget_bytes(MemoryBudget{2.0, 0, 0}, 1000), 2000u);
  EXPECT_EQ(budget_bytes(MemoryBudget{1.3, 4096}, 1000), 4096u) << "bytes, when given, win";
  CudaCandidate candidate;
  candidate.pool_bytes = 60 * kMiB;
  EXPECT_FALSE(over_budget(candidate, 88 * kMiB));
  candidate.workspace_bytes = 32 * kMiB;
  EXPECT_TRUE(over_budget(candidate, 88 * kMiB)) << "its cuBLAS workspace counts with its pool";
}

// Four matrix products side by side with small results (a transformer layer's projections at one
// token): under the default budget on Hopper (32 MiB of cuBLAS workspace a stream), the sequential
// graph holds one workspace and its pool, and the plan is capped at the streams whose workspaces
// fit the 64 MiB of headroom: two. Without workspaces (a pool budget) all four fit.
TEST(MeasuredChoice, TheDefaultBudgetCapsProductsAtTheStreamsWhoseWorkspacesFit) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  Graph graph;
  const ValueId x = graph.add_input("x");
  std::vector<ValueId> ends;
  for (int k = 0; k < 4; ++k) ends.push_back(graph.node(graph.add_node("aten::mm", {x}, {"Tensor"})).outputs[0]);
  graph.add_output(graph.node(graph.add_node("aten::cat", ends, {"Tensor"})).outputs[0]);
  std::vector<NodeShapes> shapes(graph.size());
  for (NodeShapes& node : shapes) node.outputs.push_back(TensorShape{{1024}, 4});
  const PlanOptions plan;
  ASSERT_EQ(make_plan(graph, plan).stream_count, 4);
  const BudgetFit fit = fit_to_budget(graph, plan, {}, shapes, MemoryBudget{}, CaptureHold::kRecordStream, 32 * kMiB);
  EXPECT_EQ(fit.sequential_workspace_estimate_bytes, 32 * kMiB);
  EXPECT_EQ(fit.budget_bytes, fit.sequential_estimate_bytes + 32 * kMiB + 64 * kMiB);
  EXPECT_TRUE(fit.applies);
  EXPECT_EQ(fit.stream_cap, 2);
  const BudgetFit pools_only = fit_to_budget(graph, plan, {}, shapes, MemoryBudget{}, CaptureHold::kRecordStream, 0);
  EXPECT_EQ(pools_only.stream_cap, 0) << "the pools alone fit";
}

}  // namespace
}  // namespace opara
