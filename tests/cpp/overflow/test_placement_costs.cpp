// placement_costs: a recorded profile turned into what Comm+SD weighs. A profile or shapes of
// another node count are errors naming both counts; times go from ns to us; a node that launches
// a kernel without a measured CPU time can never move to the CPU, a view without one is free;
// value bytes come from recorded shapes where given, else from each node's bytes_out split evenly
// over its tensor outputs, and model inputs from the profile's input shapes and dtypes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "graph_builders.h"
#include "opara/error.h"
#include "opara/placement.h"
#include "overflow/placements.h"
#include "placement_fixtures.h"

namespace opara {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using testing::graph_from_edges;
using ::testing::HasSubstr;
using testing::out;
using ::testing::ThrowsMessage;

// A profile of `graph` in which every node took `gpu_ns` on the GPU and `cpu_ns` on the CPU.
Profile profile_of(const Graph& graph, double gpu_ns = 1000, double cpu_ns = 2000) {
  Profile profile;
  profile.model_path = "profiled.pt";
  for (const Node& node : graph.nodes()) {
    NodeProfile measured;
    measured.id = node.id;
    measured.kind = node.kind;
    measured.gpu_ns = gpu_ns;
    measured.cpu_ns = cpu_ns;
    profile.nodes.push_back(measured);
  }
  return profile;
}

TEST(PlacementCosts, AProfileOfAnotherNodeCountIsAnErrorNamingBothCounts) {
  Graph graph = graph_from_edges(3, {{0, 1}, {1, 2}});
  const Profile profile = profile_of(graph_from_edges(2, {{0, 1}}));
  EXPECT_THAT([&] { placement_costs(graph, profile); },
              ThrowsMessage<Error>(AllOf(HasSubstr("profiled.pt"), HasSubstr("the profile has 2 nodes, the model 3"),
                                         HasSubstr("profile this model again"))));
  graph.source_path = "model.pt";  // the model's file is named when it has one
  EXPECT_THAT([&] { placement_costs(graph, profile); }, ThrowsMessage<Error>(HasSubstr("model.pt: the profile has")));
}

TEST(PlacementCosts, ShapesOfAnotherNodeCountAreAnErrorNamingBothCounts) {
  const Graph graph = graph_from_edges(3, {{0, 1}, {1, 2}});
  EXPECT_THAT([&] { placement_costs(graph, profile_of(graph), std::vector<NodeShapes>(2)); },
              ThrowsMessage<Error>(HasSubstr("shapes were recorded for 2 nodes, the model has 3")));
  EXPECT_NO_THROW(placement_costs(graph, profile_of(graph), std::vector<NodeShapes>(3)));
}

TEST(PlacementCosts, TimesAreInMicrosecondsWithTheProfilesBandwidthsAndTheGivenAlpha) {
  const Graph graph = graph_from_edges(2, {{0, 1}});
  Profile profile = profile_of(graph, 1500, 2500);
  profile.nodes[1].gpu_ns = 40;
  profile.h2d_bytes_per_s = 2e9;
  profile.d2h_bytes_per_s = 3e9;
  const PlacementCosts costs = placement_costs(graph, profile, {}, 30);
  EXPECT_THAT(costs.gpu_us, ElementsAre(1.5, 0.04));
  EXPECT_THAT(costs.cpu_us, ElementsAre(2.5, 2.5));
  EXPECT_EQ(costs.h2d_bytes_per_s, 2e9);
  EXPECT_EQ(costs.d2h_bytes_per_s, 3e9);
  EXPECT_EQ(costs.alpha_us, 30);
  EXPECT_EQ(placement_costs(graph, profile).alpha_us, kDefaultAlphaUs);
}

// No CPU time means the node was not measured on the CPU, not that it is free there: a kernel
// node's CPU time is unknown and Comm+SD never moves it, however slow it is on the GPU. A view
// (no kernel) costs nothing anywhere.
TEST(PlacementCosts, AKernelNodeWithoutACpuTimeNeverMovesAndAViewWithoutOneIsFree) {
  // x -> a -> v (a view) -> b
  Graph graph = graph_from_edges(3, {{0, 1}, {1, 2}}, /*kernel_free=*/{1});
  graph.add_output(out(2));
  Profile profile = profile_of(graph, 1e9, 1000);  // a second on the GPU, a microsecond on the CPU
  profile.nodes[0].cpu_ns = 0;
  profile.nodes[1].cpu_ns = 0;
  profile.nodes[2].cpu_ns = -1;  // what a failed measurement might leave
  const PlacementCosts costs = placement_costs(graph, profile);
  EXPECT_EQ(costs.cpu_us[0], PlacementCosts::kUnknownUs);
  EXPECT_EQ(costs.cpu_us[1], 0);
  EXPECT_EQ(costs.cpu_us[2], PlacementCosts::kUnknownUs);
  EXPECT_THAT(comm_sd_placement(graph, costs).placement,
              ElementsAre(Placement::kGpu, Placement::kGpu, Placement::kGpu));
  // With its CPU time measured, the same chain moves.
  const PlacementCosts measured = placement_costs(graph, profile_of(graph, 1e9, 1000));
  EXPECT_THAT(comm_sd_placement(graph, measured).placement,
              ElementsAre(Placement::kCpu, Placement::kCpu, Placement::kCpu));
}

TensorShape shape(std::vector<std::int64_t> sizes, std::int64_t element_bytes) {
  return TensorShape{std::move(sizes), element_bytes};
}

// x -> pair (two tensors) ; x -> mixed (tensor, int, tensor) ; x -> list (one Tensor[] value).
struct MultiOutputGraph {
  Graph graph;
  NodeId pair;
  NodeId mixed;
  NodeId list;
};

MultiOutputGraph multi_output_graph() {
  MultiOutputGraph g;
  const ValueId x = g.graph.add_input("x");
  g.pair = g.graph.add_node("test::pair", {x}, {"Tensor", "Tensor"});
  g.mixed = g.graph.add_node("test::mixed", {x}, {"Tensor", "int", "Tensor"});
  g.list = g.graph.add_node("test::list", {x}, {"Tensor[]"});
  return g;
}

TEST(PlacementCostsBytes, WithoutShapesBytesOutIsSplitEvenlyOverTheTensorOutputs) {
  const MultiOutputGraph g = multi_output_graph();
  Profile profile = profile_of(g.graph);
  profile.nodes[g.pair].bytes_out = 100;
  profile.nodes[g.mixed].bytes_out = 90;
  profile.nodes[g.list].bytes_out = 70;
  const PlacementCosts costs = placement_costs(g.graph, profile);
  const auto bytes_of = [&](NodeId node, int k) { return costs.value_bytes[g.graph.node(node).outputs[k]]; };
  EXPECT_EQ(bytes_of(g.pair, 0), 50);
  EXPECT_EQ(bytes_of(g.pair, 1), 50);
  EXPECT_EQ(bytes_of(g.mixed, 0), 45);
  EXPECT_EQ(bytes_of(g.mixed, 1), 0);  // an int is no copy
  EXPECT_EQ(bytes_of(g.mixed, 2), 45);
  EXPECT_EQ(bytes_of(g.list, 0), 0);  // a list is not a "Tensor" value: only its shapes give it bytes
}

TEST(PlacementCostsBytes, RecordedShapesWinOverBytesOut) {
  const MultiOutputGraph g = multi_output_graph();
  Profile profile = profile_of(g.graph);
  for (NodeProfile& node : profile.nodes) node.bytes_out = 1000;
  std::vector<NodeShapes> shapes(g.graph.size());
  shapes[g.pair].outputs = {shape({2, 3}, 4), shape({5}, 2)};                // one per output
  shapes[g.mixed].outputs = {shape({7}, 8)};                                 // not one per output: bytes_out
  shapes[g.list].outputs = {shape({2, 2}, 4), shape({3}, 4), shape({}, 8)};  // all of the one list output
  const PlacementCosts costs = placement_costs(g.graph, profile, shapes);
  const auto bytes_of = [&](NodeId node, int k) { return costs.value_bytes[g.graph.node(node).outputs[k]]; };
  EXPECT_EQ(bytes_of(g.pair, 0), 24);
  EXPECT_EQ(bytes_of(g.pair, 1), 10);
  EXPECT_EQ(bytes_of(g.mixed, 0), 500);
  EXPECT_EQ(bytes_of(g.mixed, 1), 0);
  EXPECT_EQ(bytes_of(g.mixed, 2), 500);
  EXPECT_EQ(bytes_of(g.list, 0), 16 + 12 + 8);  // a 0-dim tensor is one element
}

TEST(PlacementCostsBytes, ANodeWithoutRecordedOutputsFallsBackToBytesOut) {
  const Graph graph = graph_from_edges(2, {{0, 1}});
  Profile profile = profile_of(graph);
  profile.nodes[0].bytes_out = 64;
  profile.nodes[1].bytes_out = 32;
  std::vector<NodeShapes> shapes(2);
  shapes[1].outputs = {shape({4}, 4)};
  const PlacementCosts costs = placement_costs(graph, profile, shapes);
  EXPECT_EQ(costs.value_bytes[out(0)], 64);
  EXPECT_EQ(costs.value_bytes[out(1)], 16);
}

// The profile lists the model's tensor inputs in order; other inputs (an int) are skipped.
TEST(PlacementCostsBytes, ModelInputsTakeTheProfilesInputShapesAndDtypes) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const ValueId n = graph.add_input("n", "int");
  const ValueId y = graph.add_input("y");
  const ValueId z = graph.add_input("z");
  const ValueId w = graph.add_input("w");
  graph.add_node("test::use", {x, n, y, z, w}, {"Tensor"});
  Profile profile = profile_of(graph);
  profile.inputs = {{{2, 3, 4}, "Float"}, {{10}, "Half"}, {{3}, "Long"}, {{5}, "NoSuchType"}};
  std::vector<NodeShapes> shapes(1);
  shapes[0].arguments = {{shape({1}, 1)}};  // argument shapes do not size the model's inputs
  for (const auto& given : {std::vector<NodeShapes>{}, shapes}) {
    const PlacementCosts costs = placement_costs(graph, profile, given);
    EXPECT_EQ(costs.value_bytes[x], 2 * 3 * 4 * 4);
    EXPECT_EQ(costs.value_bytes[n], 0);
    EXPECT_EQ(costs.value_bytes[y], 10 * 2);
    EXPECT_EQ(costs.value_bytes[z], 3 * 8);
    EXPECT_EQ(costs.value_bytes[w], 0);  // a dtype the profile names but no size is known for
  }
  profile.inputs.resize(1);  // fewer inputs recorded than the model has: the rest stay 0
  const PlacementCosts costs = placement_costs(graph, profile);
  EXPECT_EQ(costs.value_bytes[x], 96);
  EXPECT_EQ(costs.value_bytes[y], 0);
}

}  // namespace
}  // namespace opara
