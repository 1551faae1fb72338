// estimate_makespan against makespans worked out by hand on three- to five-node graphs: copies
// and split costs on a chain, streams and threads as resources, one copy engine per direction
// and one copy per value, views that take no time, ordering edges across sides.
#include <gtest/gtest.h>

#include "graph_builders.h"
#include "opara/error.h"
#include "opara/placement.h"
#include "overflow/placements.h"
#include "placement_fixtures.h"

namespace opara {
namespace {

using testing::graph_from_edges;
using testing::microsecond_costs;
using testing::out;

constexpr Placement G = Placement::kGpu;
constexpr Placement C = Placement::kCpu;
constexpr Placement H = Placement::kHost;

TEST(MakespanEstimate, ChainPaysCopiesAndTheSplit) {
  // The example at the top of makespan_estimate.cpp: 1 MB values at 1 GB/s, sync 10, launch 5.
  Graph graph = graph_from_edges(3, {{0, 1}, {1, 2}});
  graph.add_output(out(2));
  PlacementCosts costs = microsecond_costs(graph, 100, 20, 1e6);
  costs.h2d_bytes_per_s = costs.d2h_bytes_per_s = 1e9;
  costs.gpu_us[1] = 30;
  EXPECT_DOUBLE_EQ(estimate_makespan(graph, {G, G, G}, costs, 1, 1), 230);
  // a GPU 0..100; copy 100..1100, host at 1110; b 1110..1130; copy 1130..2130, GPU at 2135; c.
  EXPECT_DOUBLE_EQ(estimate_makespan(graph, {G, C, G}, costs, 1, 1), 2235);
  // The output of a CPU node is copied back before the run ends: x on the host at 1000 + 10,
  // three nodes of 20 us, the copy back and a launch.
  EXPECT_DOUBLE_EQ(estimate_makespan(graph, {C, C, C}, costs, 1, 1), 1010 + 60 + 1000 + 5);
}

TEST(MakespanEstimate, StreamsAndThreadsAreResources) {
  // x -> a, b, d; (a, b, d) -> c. a, b, d take 100 us, c 10.
  Graph graph = graph_from_edges(4, {{0, 3}, {1, 3}, {2, 3}});
  graph.add_output(out(3));
  PlacementCosts costs = microsecond_costs(graph, 100, 100);
  costs.gpu_us[3] = 10;
  EXPECT_DOUBLE_EQ(estimate_makespan(graph, {G, G, G, G}, costs, 1, 1), 310);
  EXPECT_DOUBLE_EQ(estimate_makespan(graph, {G, G, G, G}, costs, 2, 1), 210);
  EXPECT_DOUBLE_EQ(estimate_makespan(graph, {G, G, G, G}, costs, 3, 1), 110);
  // b and d on the host (at 10 after the sync): one thread runs them 10..110..210, two at once.
  EXPECT_DOUBLE_EQ(estimate_makespan(graph, {G, C, C, G}, costs, 1, 1), 210 + 5 + 10);
  EXPECT_DOUBLE_EQ(estimate_makespan(graph, {G, C, C, G}, costs, 1, 2), 110 + 5 + 10);
}

TEST(MakespanEstimate, OneCopyEnginePerDirectionOneCopyPerValue) {
  // x -> a, x -> b on the GPU (10 us, two streams); c reads a, d and e read b, on the host
  // (10 us, three threads); 1000-byte values. a's copy 10..1010, b's waits: 1010..2010.
  Graph graph = graph_from_edges(5, {{0, 2}, {1, 3}, {1, 4}});
  PlacementCosts costs = microsecond_costs(graph, 10, 10, 1000);
  costs.value_bytes[0] = 0;
  for (NodeId id : {2, 3, 4}) costs.value_bytes[out(id)] = 0;
  EXPECT_DOUBLE_EQ(estimate_makespan(graph, {G, G, C, C, C}, costs, 2, 3), 2010 + 10 + 10);
}

TEST(MakespanEstimate, ViewsTakeNoTimeAndOrderingEdgesWaitAcrossSides) {
  // x -> a -> v -> b with v a view: no time, no stream.
  Graph graph = graph_from_edges(3, {{0, 1}, {1, 2}}, /*kernel_free=*/{1});
  const PlacementCosts costs = microsecond_costs(graph, 100, 100);
  EXPECT_DOUBLE_EQ(estimate_makespan(graph, {G, G, G}, costs, 1, 1), 200);
  // x -> a, x -> b, a before b by an ordering edge: b on the host waits for a and the sync.
  Graph ordered = graph_from_edges(2, {});
  ordered.add_order_edge(0, 1);
  const PlacementCosts ordered_costs = microsecond_costs(ordered, 100, 50);
  EXPECT_DOUBLE_EQ(estimate_makespan(ordered, {G, H}, ordered_costs, 2, 1), 100 + 10 + 50);
}

TEST(MakespanEstimate, RefusesMismatchedSizesAndNoResources) {
  const Graph graph = graph_from_edges(2, {{0, 1}});
  const PlacementCosts costs = microsecond_costs(graph, 1, 1);
  EXPECT_THROW(estimate_makespan(graph, {G}, costs, 1, 1), Error);
  EXPECT_THROW(estimate_makespan(graph, {G, G}, costs, 0, 1), Error);
}

}  // namespace
}  // namespace opara
