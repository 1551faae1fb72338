// Streams that cannot pay for their events (PlanOptions::payoff) are merged into the stream they
// were forked from before the cap; those that can, and every stream without a payoff, stay.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "graph_builders.h"
#include "opara/plan.h"
#include "schedule/stages.h"

namespace opara {
namespace {

using testing::graph_from_edges;
using testing::random_dag;

std::vector<NodeCost> demands(const std::vector<double>& values) {
  std::vector<NodeCost> costs;
  for (double value : values) costs.push_back({OpClass::kMemory, value});
  return costs;
}

Plan planned(const Graph& graph, const std::vector<NodeCost>& costs, StreamPayoff payoff) {
  PlanOptions options{StreamPolicy::kOpara, OrderPolicy::kTopological};
  options.payoff = payoff;
  return make_plan(graph, options, costs);
}

// 0 forks 1 (inheriting 0's stream) and 2 (a stream of its own); 3 joins them on 0's stream. The
// side stream has two cross-stream dependencies: 2 event pairs.
TEST(StreamPayoff, AStreamCheaperThanItsEventsJoinsTheStreamItWasForkedFrom) {
  const Graph graph = graph_from_edges(4, {{0, 1}, {0, 2}, {1, 3}, {2, 3}});
  const StreamPayoff payoff{10, 1};
  EXPECT_EQ(planned(graph, demands({50, 50, 5, 50}), {}).stream_count, 2) << "no payoff: the policy's streams";
  const Plan cheap = planned(graph, demands({50, 50, 5, 50}), payoff);
  EXPECT_EQ(cheap.stream_count, 1) << "5 of work against 2 event pairs of 10";
  EXPECT_THAT(validate(graph, cheap), ::testing::IsEmpty());
  EXPECT_EQ(planned(graph, demands({50, 50, 25, 50}), payoff).stream_count, 2) << "25 pays for 20";
}

TEST(StreamPayoff, EveryKernelCountsAtLeastTheFloor) {
  // The side stream is 2 -> 3 -> 4: three nodes of no estimated cost, two crossings.
  const Graph graph = graph_from_edges(6, {{0, 1}, {0, 2}, {2, 3}, {3, 4}, {1, 5}, {4, 5}});
  const std::vector<NodeCost> costs = demands({50, 50, 0, 0, 0, 50});
  EXPECT_EQ(planned(graph, costs, StreamPayoff{10, 0}).stream_count, 1);
  EXPECT_EQ(planned(graph, costs, StreamPayoff{10, 7}).stream_count, 2) << "3 kernels of at least 7 pay for 20";
}

TEST(StreamPayoff, OnlyTheStreamsThatCannotPayAreMergedAndTheRestRenumbered) {
  // 0 forks 1 (its stream), 2 and 3; 4 joins all three.
  const Graph graph = graph_from_edges(5, {{0, 1}, {0, 2}, {0, 3}, {1, 4}, {2, 4}, {3, 4}});
  const Plan plan = planned(graph, demands({50, 50, 1, 100, 50}), StreamPayoff{10, 0});
  ASSERT_EQ(plan.stream_count, 2);
  EXPECT_EQ(plan.stream_of[2], plan.stream_of[0]) << "the cheap branch runs where it was forked";
  EXPECT_NE(plan.stream_of[3], plan.stream_of[0]) << "the costly one keeps its stream";
  EXPECT_EQ(plan.stream_of[3], 1);
}

TEST(StreamPayoff, PlansOnRandomGraphsStayValidAndNeverOpenMoreStreams) {
  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> demand(0, 40);
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const Graph graph = random_dag(30, 0.15, seed, 0.1, 0.05);
    std::vector<NodeCost> costs;
    for (std::size_t k = 0; k < graph.size(); ++k) costs.push_back({OpClass::kMemory, demand(random)});
    for (int cap : {0, 3}) {
      PlanOptions options{StreamPolicy::kOpara, OrderPolicy::kOpara, cap};
      const Plan without = make_plan(graph, options, costs);
      options.payoff = StreamPayoff{15, 2};
      const Plan with = make_plan(graph, options, costs);
      EXPECT_THAT(validate(graph, with), ::testing::IsEmpty()) << "seed " << seed;
      EXPECT_LE(with.stream_count, without.stream_count) << "seed " << seed;
    }
  }
}

}  // namespace
}  // namespace opara
