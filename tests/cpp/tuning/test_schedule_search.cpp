// The replay of the CPU executor's dispatch rule, and the priority search on it: replayed run
// times on hand-made plans whose best schedules are known, and a block like branchy's where the
// longest-remaining-path priorities are not the best and the search finds shorter runs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "graph_builders.h"
#include "opara/error.h"
#include "opara/plan.h"
#include "tuning/schedule_search.h"

namespace opara {
namespace {

using ::testing::HasSubstr;

Plan opara_plan(const Graph& graph) {
  return make_plan(graph, {StreamPolicy::kOpara, OrderPolicy::kTopological, 0});
}

TEST(ScheduleReplay, TwoChainsRunSideBySideOnTwoWorkersAndOneAfterTheOtherOnOne) {
  const Graph graph = testing::graph_from_edges(4, {{0, 1}, {2, 3}});
  const Plan plan = opara_plan(graph);
  ASSERT_EQ(plan.stream_count, 2);
  const NodeTimes times = {10, 20, 30, 40};
  const std::vector<double> priorities(4, 0);
  EXPECT_DOUBLE_EQ(simulate_cpu_schedule(plan, times, priorities, 2, 0), 70);
  EXPECT_DOUBLE_EQ(simulate_cpu_schedule(plan, times, priorities, 1, 0), 100);
  // Each node pays the hand-off once.
  EXPECT_DOUBLE_EQ(simulate_cpu_schedule(plan, times, priorities, 2, 1), 72);
}

TEST(ScheduleReplay, AJoinWaitsForTheEventOfTheLongerBranch) {
  // 0 -> {1, 2} -> 3: the join starts when the longer branch ends, on either worker.
  const Graph graph = testing::graph_from_edges(4, {{0, 1}, {0, 2}, {1, 3}, {2, 3}});
  const Plan plan = opara_plan(graph);
  ASSERT_EQ(plan.stream_count, 2);
  EXPECT_DOUBLE_EQ(simulate_cpu_schedule(plan, {5, 10, 40, 5}, std::vector<double>(4, 0), 2, 0), 50);
}

TEST(ScheduleReplay, AFreeWorkerTakesTheReadyNodeOfHighestPriority) {
  // Three independent nodes on two workers: whichever runs last decides the end.
  const Graph graph = testing::graph_from_edges(3, {});
  const Plan plan = opara_plan(graph);
  ASSERT_EQ(plan.stream_count, 3);
  const NodeTimes times = {10, 10, 30};
  EXPECT_DOUBLE_EQ(simulate_cpu_schedule(plan, times, {3, 2, 1}, 2, 0), 40) << "the long node went last";
  EXPECT_DOUBLE_EQ(simulate_cpu_schedule(plan, times, {1, 2, 3}, 2, 0), 30) << "the long node went first";
}

TEST(ScheduleReplay, PathPrioritiesAreTheLongestWayToTheEnd) {
  const Graph graph = testing::graph_from_edges(4, {{0, 1}, {0, 2}, {1, 3}, {2, 3}});
  const Plan plan = opara_plan(graph);
  EXPECT_EQ(plan_path_priorities(plan, {5, 10, 40, 5}), (std::vector<double>{50, 15, 45, 5}));
}

TEST(ScheduleReplay, CountsThatDoNotFitThePlanAreErrors) {
  const Graph graph = testing::graph_from_edges(3, {{0, 1}, {1, 2}});
  const Plan plan = opara_plan(graph);
  EXPECT_THAT(
      [&] {
        simulate_cpu_schedule(plan, {1, 2}, {0, 0, 0}, 2);
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("2 node times for a plan of 3 nodes")));
  EXPECT_THAT(
      [&] {
        simulate_cpu_schedule(plan, {1, 2, 3}, {0}, 2);
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("1 priorities for a plan of 3 nodes")));
  EXPECT_THAT(
      [&] {
        simulate_cpu_schedule(plan, {1, 2, 3}, {0, 0, 0}, 0);
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("0 workers")));
  EXPECT_THAT([&] { search_priorities(plan, {}, {}, 2); },
              ::testing::ThrowsMessage<Error>(HasSubstr("no measured runs")));
}

// One block of branchy with its single-thread node times (us): input, relu, sigmoid, mul, add,
// pooling (246), the 1x1 after it, the thin 1x1, the 3x3 chain (100, relu, 34, relu, 35), the 5x5
// (195) and the concatenation.
struct Block {
  Graph graph = testing::graph_from_edges(15, {{0, 1},
                                               {0, 8},
                                               {0, 13},
                                               {1, 2},
                                               {1, 3},
                                               {2, 4},
                                               {3, 4},
                                               {4, 5},
                                               {4, 7},
                                               {5, 6},
                                               {8, 9},
                                               {9, 10},
                                               {10, 11},
                                               {11, 12},
                                               {6, 14},
                                               {7, 14},
                                               {12, 14},
                                               {13, 14}});
  NodeTimes times = {1, 3, 9, 5, 4.5, 246, 15, 13, 100, 2, 34, 2, 35, 195, 6};
};

TEST(PrioritySearch, FindsAShorterRunThanTheCriticalPathOnABranchyBlock) {
  const Block block;
  const Plan plan = opara_plan(block.graph);
  const std::vector<double> critical_path = plan_path_priorities(plan, block.times);
  const PrioritySearch search = search_priorities(plan, {block.times}, critical_path, 2);

  EXPECT_DOUBLE_EQ(search.start_us, simulate_cpu_schedule(plan, block.times, critical_path, 2));
  EXPECT_DOUBLE_EQ(search.best_us, simulate_cpu_schedule(plan, block.times, search.priorities, 2));
  // 383 us on the critical path, 347.5 searched; by hand the best is ~345 (the 3x3 chain runs on
  // before the 5x5, and the worker that ends the pooling takes the chain's last node).
  EXPECT_LT(search.best_us, search.start_us - 20) << search.start_us << " -> " << search.best_us;
  // No schedule beats half the work on each worker, nor the longest path.
  const double work = std::accumulate(block.times.begin(), block.times.end(), 0.0) + block.times.size();
  EXPECT_GE(search.best_us, work / 2);
  EXPECT_GE(search.best_us, *std::max_element(critical_path.begin(), critical_path.end()));
}

TEST(PrioritySearch, NeverReplaysSlowerThanItsStartAndRepeatsForASeed) {
  const Block block;
  const Plan plan = opara_plan(block.graph);
  NodeTimes noisy = block.times;
  noisy[8] *= 1.5;  // a second run in which the 3x3 convolution ran slow
  const PrioritySearch first = search_priorities(plan, {block.times, noisy}, {}, 2);
  const PrioritySearch again = search_priorities(plan, {block.times, noisy}, {}, 2);
  EXPECT_LE(first.best_us, first.start_us);
  EXPECT_EQ(first.priorities, again.priorities);
  EXPECT_DOUBLE_EQ(first.best_us, (simulate_cpu_schedule(plan, block.times, first.priorities, 2) +
                                   simulate_cpu_schedule(plan, noisy, first.priorities, 2)) /
                                      2);
  // One worker has one schedule length whatever the priorities: nothing to find.
  const PrioritySearch alone = search_priorities(plan, {block.times}, {}, 1);
  EXPECT_DOUBLE_EQ(alone.best_us, alone.start_us);
}

}  // namespace
}  // namespace opara
