// Regions (csrc/schedule/regions.h): runs of one stream's nodes cut at cross-stream dependencies,
// small ones merged into a neighbour, laid out contiguously; every plan with regions validates.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <set>

#include "graph_builders.h"
#include "opara/error.h"
#include "opara/plan.h"

namespace opara {
namespace {

using ::testing::ElementsAre;
using testing::graph_from_edges;
using ::testing::HasSubstr;
using testing::random_dag;

PlanOptions with_regions(double min_share = kDefaultRegionMinShare) {
  PlanOptions options;
  options.regions = true;
  options.region_min_share = min_share;
  return options;
}

std::vector<NodeCost> demands(const std::vector<double>& by_node) {
  std::vector<NodeCost> costs;
  for (double demand : by_node) costs.push_back({OpClass::kMemory, demand});
  return costs;
}

// The nodes of each region, by region id.
std::vector<std::set<NodeId>> members(const Plan& plan) {
  std::vector<std::set<NodeId>> regions(plan.region_count);
  for (NodeId node = 0; node < static_cast<NodeId>(plan.region_of.size()); ++node)
    if (plan.region_of[node] != kNoRegion) regions[plan.region_of[node]].insert(node);
  return regions;
}

// a(0) -> b(1) -> c(2), and a -> d(3) -> e(4): the fork of regions.h.
Graph fork() {
  return graph_from_edges(5, {{0, 1}, {1, 2}, {0, 3}, {3, 4}});
}

TEST(Regions, AForkIsCutWhereItsStreamsMeet) {
  const Graph graph = fork();
  const Plan plan = make_plan(graph, with_regions(0.0), demands({1, 10, 10, 10, 10}));
  require_valid(graph, plan);
  // a ends its region (d depends on it from another stream); b and c stay together, d and e too.
  EXPECT_THAT(members(plan), ElementsAre(std::set<NodeId>{0}, std::set<NodeId>{1, 2}, std::set<NodeId>{3, 4}));
  EXPECT_EQ(plan.stream_count, 2);
}

TEST(Regions, ASmallBranchBesideALargeOneJoinsItsPredecessor) {
  const Graph graph = fork();
  // d and e are 2% of b and c: not worth a stream and an event pair.
  const Plan plan = make_plan(graph, with_regions(0.1), demands({1, 100, 100, 1, 1}));
  require_valid(graph, plan);
  EXPECT_EQ(plan.region_count, 1);
  EXPECT_EQ(plan.stream_count, 1);
}

TEST(Regions, BranchesOfEqualCostStayApart) {
  const Graph graph = fork();
  const Plan plan = make_plan(graph, with_regions(0.1), demands({1, 50, 50, 50, 50}));
  require_valid(graph, plan);
  const std::vector<std::set<NodeId>> regions = members(plan);
  ASSERT_EQ(regions.size(), 3U);
  EXPECT_EQ(regions[1], (std::set<NodeId>{1, 2}));
  EXPECT_EQ(regions[2], (std::set<NodeId>{3, 4}));
  EXPECT_NE(plan.stream_of[1], plan.stream_of[3]) << "the two branches must still run side by side";
}

TEST(Regions, AChainIsOneRegion) {
  const Graph graph = graph_from_edges(6, {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}});
  const Plan plan = make_plan(graph, with_regions());
  require_valid(graph, plan);
  EXPECT_EQ(plan.region_count, 1);
  EXPECT_THAT(plan.region_of, ElementsAre(0, 0, 0, 0, 0, 0));
}

TEST(Regions, KernelFreeNodesAreInNoRegionAndComeBeforeTheirUsers) {
  // 0 -> view(1) -> 2, and 0 -> 3: the view belongs to no region.
  const Graph graph = graph_from_edges(4, {{0, 1}, {1, 2}, {0, 3}}, /*kernel_free=*/{1});
  const Plan plan = make_plan(graph, with_regions(0.0), demands({1, 0, 10, 10}));
  require_valid(graph, plan);
  EXPECT_EQ(plan.region_of[1], kNoRegion);
  EXPECT_NE(plan.region_of[2], kNoRegion);
}

TEST(Regions, AJoinWaitsForEveryBranchRegion) {
  // Three branches of one input, each two nodes long, joined by one node.
  const Graph graph = graph_from_edges(8, {{0, 1}, {1, 2}, {0, 3}, {3, 4}, {0, 5}, {5, 6}, {2, 7}, {4, 7}, {6, 7}});
  const Plan plan = make_plan(graph, with_regions(0.1), demands({1, 20, 20, 20, 20, 20, 20, 1}));
  require_valid(graph, plan);
  const int join = plan.region_of[7];
  for (NodeId branch_end : {2, 4, 6}) EXPECT_LT(plan.region_of[branch_end], join);
  std::set<int> branch_streams;
  for (NodeId branch_start : {1, 3, 5}) branch_streams.insert(plan.stream_of[branch_start]);
  EXPECT_EQ(branch_streams.size(), 3U) << "equal branches run side by side";
}

TEST(Regions, EveryPlanWithRegionsValidatesOnRandomGraphs) {
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    const Graph graph = random_dag(40, 0.08, seed, /*kernel_free_share=*/0.15);
    std::vector<double> by_node;
    for (NodeId node = 0; node < static_cast<NodeId>(graph.size()); ++node) by_node.push_back(1 + (node * 37 % 11));
    for (double min_share : {0.0, 0.1, 0.5}) {
      for (StreamPolicy streams : {StreamPolicy::kOpara, StreamPolicy::kNimble}) {
        PlanOptions options = with_regions(min_share);
        options.streams = streams;
        const Plan plan = make_plan(graph, options, demands(by_node));
        EXPECT_TRUE(validate(graph, plan).empty()) << "seed " << seed << ", min share " << min_share;
        std::size_t in_regions = 0;
        for (int region : plan.region_of) in_regions += region != kNoRegion ? 1 : 0;
        EXPECT_LE(plan.region_count, static_cast<int>(in_regions));
        PlanOptions without = options;
        without.regions = false;
        EXPECT_LE(plan.stream_count, make_plan(graph, without, demands(by_node)).stream_count) << "seed " << seed;
      }
    }
  }
}

TEST(Regions, AWriteOfStateIsInTheRegionOfTheNodesAroundIt) {
  // 0 -> 1 (writes its input in place: a cache's new row) -> 2, and 0 -> 3 beside the write, on one
  // stream, nothing beside: the compiled region writes the cache where it lives, so the write cuts
  // nothing and the whole is one region.
  const Graph graph = graph_from_edges(4, {{0, 1}, {1, 2}, {0, 3}}, {}, /*writers=*/{1});
  PlanOptions options = with_regions(1e9);
  options.streams = StreamPolicy::kSingle;
  const Plan plan = make_plan(graph, options);
  require_valid(graph, plan);
  EXPECT_THAT(plan.region_of, ElementsAre(0, 0, 0, 0));
}

TEST(Regions, ADecoderLayerWithItsCacheWritesMergedWholeIsOneRegion) {
  // A decoder layer: 0 makes K and V (0, then 2); 1 and 3 write them into the caches; 4 reads both
  // caches. Merged whole (the CPU's plan), the writes cut nothing, wherever they fall in launch
  // order.
  const Graph graph = graph_from_edges(5, {{0, 1}, {0, 2}, {2, 3}, {1, 4}, {3, 4}, {0, 4}}, {}, /*writers=*/{1, 3});
  for (OrderPolicy order : {OrderPolicy::kTopological, OrderPolicy::kOpara}) {
    PlanOptions options = with_regions(std::numeric_limits<double>::infinity());
    options.streams = StreamPolicy::kSingle;
    options.order = order;
    const Plan plan = make_plan(graph, options, demands({5, 1, 5, 1, 5}));
    require_valid(graph, plan);
    EXPECT_EQ(plan.region_count, 1) << to_string(order);
  }
}

TEST(Regions, PlansWithWritesValidateOnRandomGraphs) {
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    const Graph graph = random_dag(40, 0.08, seed, /*kernel_free_share=*/0.1, /*writer_share=*/0.1);
    for (double min_share : {0.0, 0.5, 1e9}) {
      for (StreamPolicy streams : {StreamPolicy::kOpara, StreamPolicy::kSingle}) {
        PlanOptions options = with_regions(min_share);
        options.streams = streams;
        const Plan plan = make_plan(graph, options);
        EXPECT_TRUE(validate(graph, plan).empty()) << "seed " << seed << ", min share " << min_share;
        for (NodeId node = 0; node < static_cast<NodeId>(graph.size()); ++node) {
          if (graph.node(node).has(kLaunchesKernel)) {
            EXPECT_NE(plan.region_of[node], kNoRegion) << "seed " << seed << ": every kernel node, writes too";
          }
        }
      }
    }
  }
}

TEST(Regions, AKernelNodeInNoRegionIsReported) {
  const Graph graph = graph_from_edges(2, {{0, 1}}, {}, /*writers=*/{1});
  Plan plan = make_plan(graph, PlanOptions{StreamPolicy::kSingle});
  plan.region_of = {0, kNoRegion};
  plan.region_count = 1;
  EXPECT_THAT(validate(graph, plan), ::testing::Contains(HasSubstr("is in region -1")));
}

TEST(Regions, AnInPlaceOpOnAnIntermediateStaysInItsRegion) {
  // relu_ on a convolution's output (googlenet's ReLU(inplace=True)) writes no state.
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId conv = graph.add_node("aten::conv2d", {x}, {"Tensor"});
  const NodeId relu =
      graph.add_node("aten::relu_", {graph.node(conv).outputs[0]}, {"Tensor"}, kLaunchesKernel | kWritesInput);
  graph.add_node("aten::add", {graph.node(relu).outputs[0]}, {"Tensor"});
  const Plan plan = make_plan(graph, with_regions());
  require_valid(graph, plan);
  EXPECT_THAT(plan.region_of, ElementsAre(0, 0, 0));
}

TEST(Regions, MergingOnlyEverLowersTheRegionCount) {
  for (std::uint64_t seed = 0; seed < 30; ++seed) {
    const Graph graph = random_dag(30, 0.1, seed);
    const Plan cut_only = make_plan(graph, with_regions(0.0));
    const Plan merged = make_plan(graph, with_regions(1.0));
    EXPECT_LE(merged.region_count, cut_only.region_count) << "seed " << seed;
    EXPECT_LE(merged.stream_count, cut_only.stream_count) << "seed " << seed;
  }
}

TEST(Regions, SurviveTheJsonRoundTrip) {
  const Graph graph = fork();
  const Plan plan = make_plan(graph, with_regions(0.0), demands({1, 10, 10, 10, 10}));
  const Plan read = plan_from_json(to_json(plan));
  EXPECT_EQ(read, plan);
  EXPECT_EQ(read.region_count, 3);
}

TEST(Regions, ARegionSplitByAnotherOnItsStreamIsReported) {
  const Graph graph = graph_from_edges(3, {{0, 1}, {1, 2}});
  Plan plan = make_plan(graph, PlanOptions{StreamPolicy::kSingle});
  plan.region_of = {0, 1, 0};
  plan.region_count = 2;
  EXPECT_THAT(validate(graph, plan), ::testing::Contains(HasSubstr("region 0 is not contiguous on stream 0")));
}

TEST(Regions, RegionsThatDependOnEachOtherInARingAreReported) {
  // 0 and 2 in one region, 1 (between them, on another stream) in another: 0 -> 1 -> 2.
  const Graph graph = graph_from_edges(3, {{0, 1}, {1, 2}});
  Plan plan = make_plan(graph, PlanOptions{StreamPolicy::kSingle});
  plan.stream_count = 2;
  plan.stream_of = {0, 1, 0};
  plan.waits = {{}, {0}, {1}};
  plan.records = {1, 1, 0};
  plan.region_of = {0, 1, 0};
  plan.region_count = 2;
  EXPECT_THAT(validate(graph, plan), ::testing::Contains(HasSubstr("the regions form a cycle")));
}

TEST(Regions, ANegativeShareIsRefused) {
  const Graph graph = fork();
  EXPECT_THROW((void)make_plan(graph, with_regions(-1.0)), Error);
}

}  // namespace
}  // namespace opara
