// The memory pool a plan's capture reserves, estimated without a GPU: the caching allocator's
// rules (size classes, segments, blocks reused only on their own stream, splits and merges) and
// the capture's lifetimes (views, outputs, reads on other streams, keep-alive).
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "graph_builders.h"
#include "opara/plan.h"
#include "schedule/caching_allocator_model.h"
#include "schedule/pool_estimate.h"

namespace opara {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Every node's one result of `bytes` float32 elements' worth (views report their base's shape).
std::vector<NodeShapes> results_of(const Graph& graph, std::size_t bytes) {
  std::vector<NodeShapes> shapes(graph.size());
  for (NodeShapes& node : shapes) node.outputs.push_back(TensorShape{{static_cast<std::int64_t>(bytes / 4)}, 4});
  return shapes;
}

Plan plan_of(const Graph& graph, StreamPolicy streams) {
  PlanOptions options;
  options.streams = streams;
  return make_plan(graph, options);
}

TEST(CachingAllocatorModel, SmallRequestsShareOneSegmentRoundedTo512Bytes) {
  CachingAllocatorModel allocator;
  for (int k = 0; k < 3; ++k) allocator.allocate(0, 1000);
  EXPECT_EQ(allocator.reserved_bytes(), kAllocatorSmallSegment);
  EXPECT_EQ(allocator.segment_count(), 1U);
  EXPECT_EQ(allocator.allocated_bytes(), 3U * 1024);
}

TEST(CachingAllocatorModel, SegmentSizesFollowTheAllocatorsClasses) {
  EXPECT_EQ(CachingAllocatorModel::segment_size(CachingAllocatorModel::rounded(1)), 2 * kMiB);
  EXPECT_EQ(CachingAllocatorModel::segment_size(CachingAllocatorModel::rounded(kMiB)), 2 * kMiB);
  EXPECT_EQ(CachingAllocatorModel::segment_size(CachingAllocatorModel::rounded(kMiB + 1)), 20 * kMiB);
  EXPECT_EQ(CachingAllocatorModel::segment_size(CachingAllocatorModel::rounded(10 * kMiB)), 10 * kMiB);
  EXPECT_EQ(CachingAllocatorModel::segment_size(CachingAllocatorModel::rounded(11 * kMiB)), 12 * kMiB);
}

TEST(CachingAllocatorModel, AFreedBlockIsReusedOnlyByItsOwnStream) {
  CachingAllocatorModel allocator;
  allocator.free(allocator.allocate(0, 12 * kMiB));
  allocator.allocate(1, 12 * kMiB);
  EXPECT_EQ(allocator.reserved_bytes(), 24 * kMiB) << "stream 1 cannot take stream 0's free block";
  allocator.allocate(0, 12 * kMiB);
  EXPECT_EQ(allocator.reserved_bytes(), 24 * kMiB) << "stream 0 takes its own block back";
}

TEST(CachingAllocatorModel, LargeRequestsSplitA20MiBSegmentAndFreedNeighboursMerge) {
  CachingAllocatorModel allocator;
  const auto first = allocator.allocate(0, 5 * kMiB);
  const auto second = allocator.allocate(0, 5 * kMiB);
  allocator.allocate(0, 5 * kMiB);
  EXPECT_EQ(allocator.reserved_bytes(), 20 * kMiB);
  allocator.free(first);
  allocator.free(second);
  allocator.allocate(0, 9 * kMiB);  // fits only in the two freed blocks merged
  EXPECT_EQ(allocator.reserved_bytes(), 20 * kMiB);
  EXPECT_EQ(allocator.peak_allocated_bytes(), 15 * kMiB);
  // Neither request above split its block: what would remain is 1 MiB or less.
  allocator.allocate(0, 4 * kMiB + 512);
  EXPECT_EQ(allocator.reserved_bytes(), 20 * kMiB);
}

TEST(PoolEstimate, OneStreamReusesWhatItFreedAndKeepAliveHoldsEverything) {
  Graph graph = testing::graph_from_edges(4, {{0, 1}, {1, 2}, {2, 3}});
  graph.add_output(graph.node(3).outputs[0]);
  const std::vector<NodeShapes> shapes = results_of(graph, 12 * kMiB);
  const Plan plan = plan_of(graph, StreamPolicy::kSingle);
  const PoolEstimate freed = estimate_pool(graph, plan, shapes, CaptureHold::kRecordStream);
  EXPECT_EQ(freed.pool_bytes, 24 * kMiB) << "the third and fourth results take the first two's blocks";
  EXPECT_EQ(freed.peak_live_bytes, 24 * kMiB);
  EXPECT_EQ(freed.held_bytes, 12 * kMiB) << "the output";
  const PoolEstimate kept = estimate_pool(graph, plan, shapes, CaptureHold::kKeepAlive);
  EXPECT_EQ(kept.pool_bytes, 48 * kMiB);
  EXPECT_EQ(kept.held_bytes, 48 * kMiB);
}

TEST(PoolEstimate, AViewKeepsItsBaseAlive) {
  // 0 -> 2 -> 3 -> 4; node 1 is a view of 0's result. Read by 4, the view keeps 0's block busy
  // when 3 allocates; read by nobody but 4's predecessor chain, 0's block is reused.
  Graph viewed = testing::graph_from_edges(5, {{0, 1}, {0, 2}, {2, 3}, {1, 4}, {3, 4}}, {1});
  viewed.add_output(viewed.node(4).outputs[0]);
  Graph unviewed = testing::graph_from_edges(5, {{0, 1}, {0, 2}, {2, 3}, {3, 4}}, {1});
  unviewed.add_output(unviewed.node(4).outputs[0]);
  unviewed.add_output(unviewed.node(1).outputs[0]);
  const auto pool = [](const Graph& graph) {
    return estimate_pool(graph, plan_of(graph, StreamPolicy::kSingle), results_of(graph, 12 * kMiB)).pool_bytes;
  };
  EXPECT_EQ(pool(viewed), 36 * kMiB);
  // Here the view is an output: 0's result lives for good all the same.
  EXPECT_EQ(pool(unviewed), 36 * kMiB);
  Graph no_view = testing::graph_from_edges(4, {{0, 1}, {1, 2}, {2, 3}});
  no_view.add_output(no_view.node(3).outputs[0]);
  EXPECT_EQ(pool(no_view), 24 * kMiB);
}

TEST(PoolEstimate, EachStreamTakesSegmentsOfItsOwnAndACrossStreamReadIsHeld) {
  // 0 and 1 both read the input; 2 reads both. Opara: 0 and 2 on one stream, 1 on another.
  Graph graph = testing::graph_from_edges(3, {{0, 2}, {1, 2}});
  graph.add_output(graph.node(2).outputs[0]);
  const std::vector<NodeShapes> shapes = results_of(graph, 4 * kMiB);
  const PoolEstimate single = estimate_pool(graph, plan_of(graph, StreamPolicy::kSingle), shapes);
  EXPECT_EQ(single.pool_bytes, 20 * kMiB);
  EXPECT_EQ(single.held_bytes, 4 * kMiB);
  const Plan two = plan_of(graph, StreamPolicy::kOpara);
  ASSERT_EQ(two.stream_count, 2);
  const PoolEstimate parallel = estimate_pool(graph, two, shapes);
  EXPECT_EQ(parallel.pool_bytes, 40 * kMiB);
  EXPECT_EQ(parallel.held_bytes, 8 * kMiB) << "1's result, read on the other stream, and the output";
}

TEST(PoolEstimate, StreamsAreCappedUntilTheEstimateFitsTheBudget) {
  // Four branches of 4 MiB results: one 20 MiB segment per stream.
  Graph graph = testing::graph_from_edges(6, {{0, 4}, {1, 4}, {2, 4}, {3, 4}, {4, 5}});
  graph.add_output(graph.node(5).outputs[0]);
  const std::vector<NodeShapes> shapes = results_of(graph, 4 * kMiB);
  const PlanOptions options;
  ASSERT_EQ(make_plan(graph, options).stream_count, 4);
  EXPECT_EQ(stream_cap_within(graph, options, {}, shapes, 80 * kMiB), 0) << "the plan fits as it is";
  const int cap = stream_cap_within(graph, options, {}, shapes, 40 * kMiB);
  EXPECT_EQ(cap, 2);
  PlanOptions capped = options;
  capped.max_streams = cap;
  EXPECT_LE(estimate_pool(graph, make_plan(graph, capped), shapes).pool_bytes, 40 * kMiB);
  EXPECT_EQ(stream_cap_within(graph, options, {}, shapes, 20 * kMiB), 1);
  EXPECT_EQ(stream_cap_within(graph, options, {}, shapes, 1), 1) << "nothing fits: the sequential graph";
}

// Branches of the given kinds, each reading the input, and a node of `join` reading them all.
Graph branches_of(const std::vector<const char*>& kinds, const char* join = "aten::cat") {
  Graph graph;
  const ValueId x = graph.add_input("x");
  std::vector<ValueId> ends;
  for (const char* kind : kinds) ends.push_back(graph.node(graph.add_node(kind, {x}, {"Tensor"})).outputs[0]);
  graph.add_output(graph.node(graph.add_node(join, ends, {"Tensor"})).outputs[0]);
  return graph;
}

TEST(PoolEstimate, EachStreamThatRunsAProductHoldsOneCublasWorkspace) {
  const Graph graph = branches_of({"aten::mm", "aten::linear", "aten::relu", "opara::region"});
  const Plan plan = plan_of(graph, StreamPolicy::kOpara);
  ASSERT_EQ(plan.stream_count, 4);
  EXPECT_EQ(estimate_blas_workspaces(graph, plan, 32 * kMiB), 3 * 32 * kMiB)
      << "the product, the linear and the region each on a stream of its own; the relu's stream has none";
  EXPECT_EQ(estimate_blas_workspaces(graph, plan_of(graph, StreamPolicy::kSingle), 32 * kMiB), 32 * kMiB)
      << "one stream: one workspace";
  const Graph no_products = branches_of({"aten::relu", "aten::add"});
  EXPECT_EQ(estimate_blas_workspaces(no_products, plan_of(no_products, StreamPolicy::kOpara), 32 * kMiB), 0U);
}

TEST(PoolEstimate, TheCapCountsTheWorkspacesOfItsStreams) {
  // Four products of 4 KiB results: small pools, and 32 MiB of workspace on each stream.
  const Graph graph = branches_of({"aten::mm", "aten::mm", "aten::mm", "aten::mm"});
  const std::vector<NodeShapes> shapes = results_of(graph, 4096);
  const PlanOptions options;
  const auto held = [&](int cap) {
    PlanOptions capped = options;
    capped.max_streams = cap;
    const Plan plan = make_plan(graph, capped);
    return estimate_pool(graph, plan, shapes).pool_bytes + estimate_blas_workspaces(graph, plan, 32 * kMiB);
  };
  const std::size_t budget = held(2);
  ASSERT_LT(budget, held(3));
  EXPECT_EQ(stream_cap_within(graph, options, {}, shapes, budget), 0) << "the pools alone fit";
  EXPECT_EQ(stream_cap_within(graph, options, {}, shapes, budget, CaptureHold::kRecordStream, 32 * kMiB), 2);
}

TEST(PoolEstimate, NoShapesNoEstimate) {
  Graph graph = testing::graph_from_edges(2, {{0, 1}});
  EXPECT_EQ(estimate_pool(graph, plan_of(graph, StreamPolicy::kSingle), {}).pool_bytes, 0U);
}

}  // namespace
}  // namespace opara
