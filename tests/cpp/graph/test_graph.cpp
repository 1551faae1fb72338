// Graph construction: data edges follow values, program order is kept, ordering edges go forward.
#include <gtest/gtest.h>

#include "opara/error.h"
#include "opara/graph.h"

namespace opara {
namespace {

TEST(Graph, DataEdgesFollowTheValuesANodeReads) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId a = graph.add_node("aten::relu", {x}, {"Tensor"});
  const NodeId b = graph.add_node("aten::sigmoid", {x}, {"Tensor"});
  const NodeId c = graph.add_node("aten::add", {graph.node(b).outputs[0], graph.node(a).outputs[0]}, {"Tensor"});
  EXPECT_EQ(graph.edges().size(), 2u);
  EXPECT_TRUE(graph.has_edge(a, c));
  EXPECT_TRUE(graph.has_edge(b, c));
  EXPECT_FALSE(graph.has_edge(a, b));
  // Predecessors in argument order (b is the first argument), successors in program order.
  EXPECT_EQ(graph.node(c).predecessors, (std::vector<NodeId>{b, a}));
  EXPECT_EQ(graph.value(x).users, (std::vector<NodeId>{a, b}));
  EXPECT_EQ(graph.value(graph.node(a).outputs[0]).producer, a);
}

TEST(Graph, ANodeReadingAValueTwiceHasOneEdge) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId a = graph.add_node("aten::relu", {x}, {"Tensor"});
  const ValueId y = graph.node(a).outputs[0];
  const NodeId b = graph.add_node("aten::mul", {y, y}, {"Tensor"});
  EXPECT_EQ(graph.node(a).successors, (std::vector<NodeId>{b}));
  EXPECT_EQ(graph.node(b).predecessors, (std::vector<NodeId>{a}));
  EXPECT_EQ(graph.value(y).users, (std::vector<NodeId>{b}));
}

TEST(Graph, OrderingEdgesGoForwardAndAreNotDuplicated) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId reader = graph.add_node("aten::mul", {x}, {"Tensor"});
  const NodeId writer = graph.add_node("aten::relu_", {x}, {"Tensor"}, kLaunchesKernel | kWritesInput);
  graph.add_order_edge(reader, writer);
  graph.add_order_edge(reader, writer);
  ASSERT_EQ(graph.edges().size(), 1u);
  EXPECT_EQ(graph.edges()[0].kind, EdgeKind::kOrder);
  EXPECT_THROW(graph.add_order_edge(writer, reader), InternalError);
  EXPECT_THROW(graph.add_order_edge(reader, reader), InternalError);
}

TEST(Graph, SuccessorsStayInProgramOrderWhenOrderingEdgesArriveLate) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId a = graph.add_node("aten::relu", {x}, {"Tensor"});
  const NodeId b = graph.add_node("aten::neg", {x}, {"Tensor"});
  const NodeId c = graph.add_node("aten::exp", {graph.node(a).outputs[0]}, {"Tensor"});
  graph.add_order_edge(a, b);
  EXPECT_EQ(graph.node(a).successors, (std::vector<NodeId>{b, c}));
}

TEST(Graph, DescribeNamesKindAndSource) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId a = graph.add_node("aten::relu", {x}, {"Tensor"});
  EXPECT_EQ(graph.describe(a), "node 0 (aten::relu)");
  graph.set_source(a, "model.py:7", "");
  EXPECT_EQ(graph.describe(a), "node 0 (aten::relu at model.py:7)");
}

TEST(Graph, ReadingAnUnknownValueIsRefused) {
  Graph graph;
  EXPECT_THROW(graph.add_node("aten::relu", {3}, {"Tensor"}), InternalError);
}

// Ids come from the graph itself: an unknown one, or an input after the state, is a bug in opara.
TEST(Graph, UnknownIdsAreInternalErrors) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId a = graph.add_node("aten::relu", {x}, {"Tensor"});
  EXPECT_THROW((void)graph.node(a + 1), InternalError);
  EXPECT_THROW((void)graph.node(-1), InternalError);
  EXPECT_THROW((void)graph.value(5), InternalError);
  EXPECT_THROW((void)graph.has_edge(a + 1, a), InternalError);
  EXPECT_THROW(graph.set_source(a + 1, "model.py:1", ""), InternalError);
  EXPECT_THROW(graph.set_value_name(5, "y"), InternalError);
}

// A decoder's K and V caches, a counter beside them: each its own buffer, in the order added.
TEST(Graph, TakesAnyNumberOfStateBuffersAfterTheCallersInputs) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const ValueId k = graph.add_state("k", nullptr);
  const ValueId v = graph.add_state("v", nullptr);
  const ValueId count = graph.add_state("count", nullptr);
  EXPECT_EQ(graph.inputs(), (std::vector<ValueId>{x, k, v, count}));
  EXPECT_EQ(graph.caller_input_count(), 1u);
  ASSERT_EQ(graph.state().size(), 3u);
  EXPECT_EQ(graph.state()[0].name, "k");
  EXPECT_EQ(graph.state()[1].value, v);
  EXPECT_EQ(graph.state()[2].name, "count");
}

TEST(Graph, AnInputAfterTheStateBuffersIsAnInternalError) {
  Graph graph;
  graph.add_state("buffer", nullptr);
  EXPECT_THROW(graph.add_input("x"), InternalError);
}

}  // namespace
}  // namespace opara
