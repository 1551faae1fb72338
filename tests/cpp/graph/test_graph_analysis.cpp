// Topological orders, width, critical path, transitive reduction, DOT; the graph-wide answers
// are checked against brute force on random DAGs.
#include <gtest/gtest.h>

#include <set>

#include "graph/graph_analysis.h"
#include "graph/reachability.h"
#include "graph_builders.h"
#include "opara/error.h"

namespace opara {
namespace {

using testing::graph_from_edges;
using testing::random_dag;

//   0 -> 1 -> 3
//   0 -> 2 -> 3
Graph diamond() {
  return graph_from_edges(4, {{0, 1}, {0, 2}, {1, 3}, {2, 3}});
}

// Largest antichain by trying every subset: the definition, for graphs of up to ~14 nodes.
std::size_t brute_force_width(const Graph& graph) {
  const Reachability reach(graph);
  const auto n = static_cast<int>(graph.size());
  std::size_t best = 0;
  for (unsigned subset = 1; subset < (1u << n); ++subset) {
    bool antichain = true;
    for (int a = 0; a < n && antichain; ++a) {
      for (int b = 0; b < n && antichain; ++b) {
        if (a != b && (subset >> a & 1u) && (subset >> b & 1u) && reach.reaches(a, b)) antichain = false;
      }
    }
    if (antichain) best = std::max<std::size_t>(best, __builtin_popcount(subset));
  }
  return best;
}

TEST(TopologicalOrder, IsProgramOrderForAnImportedGraph) {
  EXPECT_EQ(topological_order(diamond()), (std::vector<NodeId>{0, 1, 2, 3}));
}

TEST(TopologicalOrder, RandomOrdersAreTopologicalAndVaried) {
  const Graph graph = random_dag(12, 0.2, 7);
  std::set<std::vector<NodeId>> seen;
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    const auto order = random_topological_order(graph, seed);
    ASSERT_TRUE(is_topological_order(graph, order));
    seen.insert(order);
  }
  EXPECT_GT(seen.size(), 10u);
}

TEST(TopologicalOrder, CheckerRejectsBackwardEdgesMissingAndRepeatedNodes) {
  const Graph graph = diamond();
  EXPECT_TRUE(is_topological_order(graph, {0, 2, 1, 3}));
  EXPECT_FALSE(is_topological_order(graph, {1, 0, 2, 3}));
  EXPECT_FALSE(is_topological_order(graph, {0, 1, 2}));
  EXPECT_FALSE(is_topological_order(graph, {0, 1, 1, 3}));
  EXPECT_FALSE(is_topological_order(graph, {0, 1, 2, 9}));
}

TEST(Width, SmallGraphsByHand) {
  EXPECT_EQ(width(graph_from_edges(4, {{0, 1}, {1, 2}, {2, 3}})), 1u);
  EXPECT_EQ(width(diamond()), 2u);
  EXPECT_EQ(width(graph_from_edges(5, {{0, 1}, {0, 2}, {0, 3}, {0, 4}})), 4u);
  // Chains must follow reachability, not edges: 0 -> 2 -> {3, 4} and 1 -> 2.
  EXPECT_EQ(width(graph_from_edges(5, {{0, 2}, {1, 2}, {2, 3}, {2, 4}})), 2u);
  EXPECT_EQ(width(Graph{}), 0u);
}

TEST(Width, EqualsTheLargestAntichainOnRandomGraphs) {
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    const Graph graph = random_dag(11, 0.15 + 0.02 * static_cast<double>(seed % 10), seed);
    ASSERT_EQ(width(graph), brute_force_width(graph)) << "seed " << seed;
  }
}

TEST(CriticalPath, CountsNodesOrSumsWeights) {
  // 0 -> 1 -> 2 -> 4 and 0 -> 3 -> 4
  const Graph graph = graph_from_edges(5, {{0, 1}, {1, 2}, {2, 4}, {0, 3}, {3, 4}});
  const CriticalPath unweighted = critical_path(graph);
  EXPECT_EQ(unweighted.length, 4);
  EXPECT_EQ(unweighted.nodes, (std::vector<NodeId>{0, 1, 2, 4}));
  const CriticalPath weighted = critical_path(graph, {1, 1, 1, 10, 1});
  EXPECT_EQ(weighted.length, 12);
  EXPECT_EQ(weighted.nodes, (std::vector<NodeId>{0, 3, 4}));
  EXPECT_THROW(critical_path(graph, {1, 2}), InternalError);
}

TEST(RemainingPathLengths, EachNodesWeightAndTheHeaviestPathAfterIt) {
  // 0 -> 1 -> 2 -> 4 and 0 -> 3 -> 4
  const Graph graph = graph_from_edges(5, {{0, 1}, {1, 2}, {2, 4}, {0, 3}, {3, 4}});
  EXPECT_EQ(remaining_path_lengths(graph, {1, 1, 1, 1, 1}), (std::vector<double>{4, 3, 2, 2, 1}));
  EXPECT_EQ(remaining_path_lengths(graph, {1, 1, 1, 10, 1}), (std::vector<double>{12, 3, 2, 11, 1}));
  EXPECT_THROW(remaining_path_lengths(graph, {1, 2}), InternalError);
}

TEST(TransitiveReduction, DropsTheEdgeAPathImplies) {
  const Graph graph = graph_from_edges(3, {{0, 1}, {1, 2}, {0, 2}});
  const auto kept = transitive_reduction(graph);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].from, 0);
  EXPECT_EQ(kept[0].to, 1);
  EXPECT_EQ(kept[1].from, 1);
  EXPECT_EQ(kept[1].to, 2);
}

TEST(TransitiveReduction, KeepsReachabilityAndIsMinimalOnRandomGraphs) {
  for (std::uint64_t seed = 0; seed < 30; ++seed) {
    const Graph graph = random_dag(16, 0.3, seed);
    const auto kept = transitive_reduction(graph);
    std::vector<std::pair<int, int>> edges;
    for (const Edge& edge : kept) edges.emplace_back(edge.from, edge.to);
    const Graph reduced = graph_from_edges(16, edges);
    const Reachability before(graph);
    const Reachability after(reduced);
    for (NodeId a = 0; a < 16; ++a) {
      for (NodeId b = 0; b < 16; ++b) ASSERT_EQ(before.reaches(a, b), after.reaches(a, b)) << a << "->" << b;
    }
    // Minimal: no kept edge is implied by a path through another successor.
    for (const Edge& edge : kept) {
      for (NodeId middle : reduced.node(edge.from).successors) {
        ASSERT_FALSE(middle != edge.to && after.reaches(middle, edge.to)) << edge.from << "->" << edge.to;
      }
    }
  }
}

TEST(InputsWrittenInPlace, FollowsViewsAndListsButNotComputedValues) {
  Graph graph;
  const ValueId read_only = graph.add_input("read_only");
  const ValueId direct = graph.add_input("direct");
  const ValueId viewed = graph.add_input("viewed");
  const ValueId listed = graph.add_input("listed");
  const ValueId copied = graph.add_input("copied");
  graph.add_node("aten::relu_", {direct}, {"Tensor"}, kLaunchesKernel | kWritesInput);
  const ValueId view = graph.node(graph.add_node("aten::transpose", {viewed}, {"Tensor"}, kView)).outputs[0];
  graph.add_node("aten::neg_", {view}, {"Tensor"}, kLaunchesKernel | kWritesInput);
  const ValueId list = graph.node(graph.add_node("prim::ListConstruct", {listed}, {"Tensor[]"}, 0)).outputs[0];
  const ValueId element = graph.node(graph.add_node("aten::select", {list}, {"Tensor"}, kView)).outputs[0];
  graph.add_node("aten::mul_", {element, read_only}, {"Tensor"}, kLaunchesKernel | kWritesInput);
  // A computed value is fresh memory: writing it leaves the input alone.
  const ValueId fresh = graph.node(graph.add_node("aten::add", {copied, read_only}, {"Tensor"})).outputs[0];
  graph.add_node("aten::add_", {fresh, copied}, {"Tensor"}, kLaunchesKernel | kWritesInput);

  EXPECT_EQ(inputs_written_in_place(graph), (std::vector<bool>{false, true, true, true, false}));
}

TEST(Dot, DrawsEveryNodeAndOrderingEdgesDashed) {
  Graph graph = graph_from_edges(3, {{0, 1}});
  graph.add_order_edge(1, 2);
  const std::string dot = to_dot(graph);
  EXPECT_NE(dot.find("digraph"), std::string::npos);
  EXPECT_NE(dot.find("n0 -> n1;"), std::string::npos);
  EXPECT_NE(dot.find("n1 -> n2 [style=dashed];"), std::string::npos);
  EXPECT_NE(dot.find("n2 [label=\"2: op2\"]"), std::string::npos);
}

}  // namespace
}  // namespace opara
