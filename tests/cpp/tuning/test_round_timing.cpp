// Timing runners in interleaved rounds: every runner is timed in every round, the first runner of
// a round rotates, the runs are spread over the rounds, each block settles first, and a speedup is
// the median of ratios taken within rounds (so a slow round for everyone changes nothing).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/percentile.h"
#include "tuning/round_timing.h"

namespace opara {
namespace {

// A runner that logs its calls ("name:runs") and says each run took `ms`.
struct FakeRunner {
  std::string name;
  double ms;
  std::vector<std::string>* log;

  std::vector<double> operator()(int runs) const {
    log->push_back(name + ":" + std::to_string(runs));
    return std::vector<double>(static_cast<std::size_t>(runs), ms);
  }
};

TEST(RoundTiming, RotatesWhoGoesFirstSettlesEachBlockAndSpreadsTheRuns) {
  std::vector<std::string> log;
  const FakeRunner a{"a", 1, &log};
  const FakeRunner b{"b", 2, &log};
  std::vector<BlockTimer> timers = {[&a](int runs) { return a(runs); }, [&b](int runs) { return b(runs); }};
  std::vector<int> blocks;
  const RoundTimes times = time_in_rounds(timers, 3, 7, Settle{1, std::chrono::milliseconds(0)},
                                          [&blocks](int runs) { blocks.push_back(runs); });
  // 7 runs over 3 rounds: 3, 2, 2; each block is one settling run, then the timed ones.
  EXPECT_EQ(log, (std::vector<std::string>{"a:1", "a:3", "b:1", "b:3", "b:1", "b:2", "a:1", "a:2", "a:1", "a:2", "b:1",
                                           "b:2"}));
  EXPECT_EQ(blocks, (std::vector<int>{3, 3, 2, 2, 2, 2}));
  ASSERT_EQ(times.samples.size(), 2u);
  EXPECT_EQ(times.all(0), std::vector<double>(7, 1.0));  // settling runs are not samples
  EXPECT_EQ(times.all(1), std::vector<double>(7, 2.0));
  EXPECT_DOUBLE_EQ(times.speedup(0, 1), 2.0);
}

TEST(RoundTiming, NeverMoreRoundsThanRunsAndAtLeastOne) {
  std::vector<std::string> log;
  const FakeRunner a{"a", 1, &log};
  const std::vector<BlockTimer> timers = {[&a](int runs) { return a(runs); }};
  EXPECT_EQ(time_in_rounds(timers, 5, 2, Settle{0, {}}).samples[0].size(), 2u);
  EXPECT_EQ(time_in_rounds(timers, 0, 1, Settle{0, {}}).samples[0].size(), 1u);
}

TEST(RoundTiming, ASpeedupIsTheMedianOfRatiosWithinRounds) {
  RoundTimes times;
  // Round 2 is slow for both runners; the ratio within it is the same as in the others but one.
  times.samples = {{{2, 2}, {2}, {20, 20, 20}}, {{1, 1}, {4}, {10}}};
  EXPECT_EQ(times.speedups(1, 0), (std::vector<double>{2.0, 0.5, 2.0}));
  EXPECT_DOUBLE_EQ(times.speedup(1, 0), 2.0);
  EXPECT_DOUBLE_EQ(times.speedup(0, 1), 0.5);
  // Pooled instead of paired, the slow round would decide: medians 20 and 4 would say 5x.
  EXPECT_DOUBLE_EQ(percentile(times.all(0), 0.5) / percentile(times.all(1), 0.5), 5.0);
}

TEST(RoundTiming, RoundsTimedAgainJoinTheFirstOnes) {
  RoundTimes times;
  times.samples = {{{2}, {2}}, {{4}, {4}}};  // runner 1 at half the speed in both rounds
  RoundTimes again;
  again.samples = {{{2}, {2}, {2}}, {{1}, {1}, {1}}};  // then twice as fast in three more
  times.append(again);
  ASSERT_EQ(times.samples[0].size(), 5u);
  EXPECT_EQ(times.speedups(1, 0), (std::vector<double>{0.5, 0.5, 2.0, 2.0, 2.0}));
  EXPECT_DOUBLE_EQ(times.speedup(1, 0), 2.0) << "the median over all five rounds";
  EXPECT_EQ(times.all(1), (std::vector<double>{4, 4, 1, 1, 1}));
}

TEST(RoundTiming, PercentileIsTheNearestRank) {
  EXPECT_DOUBLE_EQ(percentile({5, 1, 3}, 0.5), 3);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 0.5), 3);  // rank 1.5 rounds up
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 0.0), 1);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 1.0), 4);
  EXPECT_DOUBLE_EQ(percentile({7}, 0.9), 7);
}

}  // namespace
}  // namespace opara
