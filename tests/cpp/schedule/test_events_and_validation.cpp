// Event planning (one wait per cross-stream dependency, then only the necessary ones) and the
// validator that proves plans: it must accept every plan we make and reject broken ones.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "graph/graph_analysis.h"
#include "graph_builders.h"
#include "opara/error.h"
#include "opara/plan.h"
#include "schedule/stages.h"

namespace opara {
namespace {

using testing::graph_from_edges;
using ::testing::HasSubstr;
using testing::random_dag;

// A plan with streams given by hand, events planned, in program order.
Plan plan_with_streams(const Graph& graph, std::vector<int> stream_of) {
  Plan plan;
  plan.launch_order = topological_order(graph);
  int streams = 0;
  for (int stream : stream_of) streams = std::max(streams, stream + 1);
  plan.stream_count = streams;
  EventPlan events = plan_events(graph, stream_of, plan.launch_order);
  plan.stream_of = std::move(stream_of);
  plan.waits = std::move(events.waits);
  plan.records = std::move(events.records);
  plan.events_unreduced = events.unreduced;
  return plan;
}

TEST(EventPlan, OneWaitPerCrossStreamDependency) {
  //   0 (s0) -> 1 (s1) -> 2 (s0)
  const Graph graph = graph_from_edges(3, {{0, 1}, {1, 2}, {0, 2}});
  const Plan plan = plan_with_streams(graph, {0, 1, 0});
  EXPECT_EQ(plan.waits[1], (std::vector<NodeId>{0}));
  // 2 needs 0 (same stream, in order) and 1 (another stream).
  EXPECT_EQ(plan.waits[2], (std::vector<NodeId>{1}));
  EXPECT_EQ(plan.events_unreduced, 2u);
  EXPECT_EQ(plan.wait_count(), 2u);
  EXPECT_EQ(plan.records, (std::vector<std::uint8_t>{1, 1, 0}));
  EXPECT_TRUE(validate(graph, plan).empty());
}

TEST(EventPlan, DropsWaitsImpliedThroughAnotherStream) {
  //   0 (s0) -> 1 (s1) -> 2 (s2), and 0 -> 2: waiting on 1 already orders 0 before 2.
  const Graph graph = graph_from_edges(3, {{0, 1}, {0, 2}, {1, 2}});
  const Plan plan = plan_with_streams(graph, {0, 1, 2});
  EXPECT_EQ(plan.events_unreduced, 3u);
  EXPECT_EQ(plan.waits[2], (std::vector<NodeId>{1}));
  EXPECT_EQ(plan.wait_count(), 2u);
  EXPECT_EQ(plan.event_count(), 2u);
}

TEST(EventPlan, DropsWaitsImpliedByAnEarlierWaitOnTheSameStream) {
  //   0 (s0) -> 1 (s0); 0 -> 2 (s1); 1 -> 3 (s1); 0 -> 4 (s1): once stream 1 has waited on 1 it
  //   has waited on 0 too, so 4 needs no wait of its own.
  const Graph graph = graph_from_edges(5, {{0, 1}, {0, 2}, {1, 3}, {0, 4}});
  const Plan plan = plan_with_streams(graph, {0, 0, 1, 1, 1});
  EXPECT_EQ(plan.waits[2], (std::vector<NodeId>{0}));
  EXPECT_EQ(plan.waits[3], (std::vector<NodeId>{1}));
  EXPECT_TRUE(plan.waits[4].empty());
  EXPECT_EQ(plan.events_unreduced, 3u);
}

TEST(EventPlan, KernelFreeNodesCostNoEvent) {
  //   0 (s0) -> 1 (view) -> 2 (s1): the wait goes straight to 0.
  const Graph graph = graph_from_edges(3, {{0, 1}, {1, 2}}, {1});
  const Plan plan = plan_with_streams(graph, {0, kNoStream, 1});
  EXPECT_TRUE(plan.waits[1].empty());
  EXPECT_EQ(plan.waits[2], (std::vector<NodeId>{0}));
  EXPECT_EQ(plan.records[1], 0);
  EXPECT_TRUE(validate(graph, plan).empty());
}

TEST(EventPlan, EveryWaitIsNecessaryAndTheRestSufficientOnRandomGraphs) {
  std::mt19937_64 random(11);
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const Graph graph = random_dag(14, 0.25, seed, 0.15);
    // Any stream assignment is legal; events must make it correct and be minimal.
    std::vector<int> stream_of(graph.size());
    std::uniform_int_distribution<int> pick(0, 3);
    for (const Node& node : graph.nodes()) stream_of[node.id] = node.has(kLaunchesKernel) ? pick(random) : kNoStream;
    Plan plan = plan_with_streams(graph, stream_of);
    plan.stream_count = 4;
    ASSERT_THAT(validate(graph, plan), ::testing::IsEmpty()) << "seed " << seed;
    for (std::size_t node = 0; node < graph.size(); ++node) {
      for (std::size_t k = 0; k < plan.waits[node].size(); ++k) {
        Plan without = plan;
        without.waits[node].erase(without.waits[node].begin() + static_cast<std::ptrdiff_t>(k));
        EXPECT_FALSE(validate(graph, without).empty())
            << "seed " << seed << ": the wait of node " << node << " on " << plan.waits[node][k] << " is redundant";
      }
    }
  }
}

// A correct plan for 0 -> 1 -> 2 and 0 -> 2 with three streams, to break in the tests below.
struct SmallPlan {
  Graph graph = graph_from_edges(3, {{0, 1}, {0, 2}, {1, 2}});
  Plan plan = plan_with_streams(graph, {0, 1, 2});
};

TEST(Validate, AcceptsTheCorrectPlan) {
  SmallPlan small;
  EXPECT_THAT(validate(small.graph, small.plan), ::testing::IsEmpty());
  EXPECT_NO_THROW(require_valid(small.graph, small.plan));
}

TEST(Validate, RejectsAMissingWait) {
  SmallPlan small;
  small.plan.waits[2].clear();
  // Both dependencies of node 2 lose their order: each is named.
  const auto problems = validate(small.graph, small.plan);
  EXPECT_THAT(problems, ::testing::Contains(HasSubstr("node 2 (op2) on stream 2 depends on node 1 (op1) on stream 1")));
  EXPECT_THAT(problems, ::testing::Contains(HasSubstr("node 2 (op2) on stream 2 depends on node 0 (op0) on stream 0")));
  EXPECT_THROW(require_valid(small.graph, small.plan), Error);
}

TEST(Validate, RejectsAWaitOnAnEventNeverRecorded) {
  SmallPlan small;
  small.plan.records[1] = 0;
  const auto problems = validate(small.graph, small.plan);
  ASSERT_FALSE(problems.empty());
  EXPECT_THAT(problems[0], HasSubstr("waits on the event of node 1 (op1) on stream 1, which never records one"));
}

TEST(Validate, RejectsAWaitBeforeItsRecord) {
  //   0 and 1 independent on two streams; 1 waits on 0, but 1 is launched first.
  const Graph graph = graph_from_edges(2, {});
  Plan plan;
  plan.stream_count = 2;
  plan.stream_of = {0, 1};
  plan.launch_order = {1, 0};
  plan.waits = {{}, {0}};
  plan.records = {1, 0};
  const auto problems = validate(graph, plan);
  ASSERT_FALSE(problems.empty());
  EXPECT_THAT(problems[0], HasSubstr("which is recorded only later in launch order"));
}

TEST(Validate, RejectsANonTopologicalOrder) {
  SmallPlan small;
  small.plan.launch_order = {0, 2, 1};
  const auto problems = validate(small.graph, small.plan);
  ASSERT_FALSE(problems.empty());
  EXPECT_THAT(problems[0], HasSubstr("not topological: node 2 (op2) is launched before node 1 (op1)"));
}

TEST(Validate, RejectsMissingAndRepeatedNodesAndWrongSizes) {
  SmallPlan small;
  Plan repeated = small.plan;
  repeated.launch_order = {0, 1, 1};
  EXPECT_THAT(validate(small.graph, repeated), ::testing::Contains(HasSubstr("launched twice")));
  EXPECT_THAT(validate(small.graph, repeated), ::testing::Contains(HasSubstr("node 2 (op2) is never launched")));
  Plan short_plan = small.plan;
  short_plan.stream_of.pop_back();
  EXPECT_THAT(validate(small.graph, short_plan), ::testing::Contains(HasSubstr("the graph has 3")));
}

TEST(Validate, RejectsStreamsOutOfRangeAndStreamsOnKernelFreeNodes) {
  const Graph graph = graph_from_edges(3, {{0, 1}, {1, 2}}, {1});
  Plan plan = plan_with_streams(graph, {0, kNoStream, 0});
  EXPECT_THAT(validate(graph, plan), ::testing::IsEmpty());
  Plan kernel_free_on_stream = plan;
  kernel_free_on_stream.stream_of[1] = 0;
  EXPECT_THAT(validate(graph, kernel_free_on_stream), ::testing::Contains(HasSubstr("launches no kernel")));
  Plan out_of_range = plan;
  out_of_range.stream_of[2] = 5;
  EXPECT_THAT(validate(graph, out_of_range), ::testing::Contains(HasSubstr("has stream 5 (the plan has 1 streams)")));
}

TEST(Validate, CoversDependenciesThroughKernelFreeNodes) {
  //   0 (s0) -> 1 (view) -> 2 (s1): without the wait on 0 the plan is wrong.
  const Graph graph = graph_from_edges(3, {{0, 1}, {1, 2}}, {1});
  Plan plan = plan_with_streams(graph, {0, kNoStream, 1});
  plan.waits[2].clear();
  EXPECT_THAT(validate(graph, plan), ::testing::Contains(HasSubstr("node 2 (op2) on stream 1 depends on node 0")));
}

}  // namespace
}  // namespace opara
