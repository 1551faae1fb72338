// Launch orders (program order, Opara's Alg. 2) and where their costs come from: the static
// estimate from recorded shapes, and recorded profiles.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "exec/record_shapes.h"
#include "graph/graph_analysis.h"
#include "graph_builders.h"
#include "model_files.h"
#include "opara/error.h"
#include "opara/load.h"
#include "opara/plan.h"
#include "opara/profile.h"
#include "schedule/stages.h"
#include "tools/model_inputs.h"

namespace opara {
namespace {

using testing::graph_from_edges;
using ::testing::HasSubstr;
using testing::random_dag;

constexpr OpClass kMem = OpClass::kMemory;
constexpr OpClass kComp = OpClass::kCompute;

TEST(LaunchOrder, TopologicalIsProgramOrder) {
  const Graph graph = graph_from_edges(4, {{0, 2}, {1, 3}});
  EXPECT_EQ(launch_order(graph, OrderPolicy::kTopological), (std::vector<NodeId>{0, 1, 2, 3}));
}

TEST(LaunchOrder, OparaAlternatesClassesSmallestDemandFirst) {
  // Five independent nodes: memory 0 (demand 5), 1 (1), 4 (3); compute 2 (3), 3 (2).
  const Graph graph = graph_from_edges(5, {});
  const std::vector<NodeCost> costs = {{kMem, 5}, {kMem, 1}, {kComp, 3}, {kComp, 2}, {kMem, 3}};
  // memory 1, compute 3, memory 4, compute 2, then memory 0 alone.
  EXPECT_EQ(launch_order(graph, OrderPolicy::kOpara, costs), (std::vector<NodeId>{1, 3, 4, 2, 0}));
}

TEST(LaunchOrder, OparaAddsNodesAsTheyBecomeReady) {
  //   0 (memory, 1) -> 2 (compute, 1); 1 (compute, 9); 3 (memory, 0.5) after 2.
  const Graph graph = graph_from_edges(4, {{0, 2}, {2, 3}});
  const std::vector<NodeCost> costs = {{kMem, 1}, {kComp, 9}, {kComp, 1}, {kMem, 0.5}};
  // memory 0; compute: 2 is ready now and smaller than 1; memory 3; compute 1.
  EXPECT_EQ(launch_order(graph, OrderPolicy::kOpara, costs), (std::vector<NodeId>{0, 2, 3, 1}));
}

TEST(LaunchOrder, OparaTakesKernelFreeNodesAtOnce) {
  //   0 (memory, 1) -> 1 (view) -> 3 (compute, 1); 2 (memory, 0.1) independent.
  const Graph graph = graph_from_edges(4, {{0, 1}, {1, 3}}, {1});
  const std::vector<NodeCost> costs = {{kMem, 1}, {kMem, 0}, {kMem, 0.1}, {kComp, 1}};
  // Memory first: 2 is the smallest; compute: none ready; memory 0; the view at once; compute 3.
  EXPECT_EQ(launch_order(graph, OrderPolicy::kOpara, costs), (std::vector<NodeId>{2, 0, 1, 3}));
}

TEST(LaunchOrder, OparaOnAnInceptionModuleLikeFig6) {
  // One inception module with its activations, as in the paper's Fig. 6 (demands in brackets):
  //   0 stem conv [C 4]
  //   1x1:        1 conv [C 2] -> 2 relu [M 1]
  //   1x1 -> 3x3: 3 conv [C 1] -> 4 relu [M 0.5] -> 5 conv [C 5]
  //   1x1 -> 5x5: 6 conv [C 1.5] -> 7 conv [C 3]
  //   pool -> 1x1: 8 max_pool [M 2] -> 9 conv [C 1]
  //   10 concat [M 3] of 2, 5, 7, 9
  const Graph graph = graph_from_edges(
      11, {{0, 1}, {1, 2}, {0, 3}, {3, 4}, {4, 5}, {0, 6}, {6, 7}, {0, 8}, {8, 9}, {2, 10}, {5, 10}, {7, 10}, {9, 10}});
  const std::vector<NodeCost> costs = {{kComp, 4},   {kComp, 2}, {kMem, 1}, {kComp, 1}, {kMem, 0.5}, {kComp, 5},
                                       {kComp, 1.5}, {kComp, 3}, {kMem, 2}, {kComp, 1}, {kMem, 3}};
  // The stem (only compute is ready); the pool, the only memory-bound node; compute 3 (1, ties
  // with 9 by program order); its relu as soon as it is ready; compute 9; no memory-bound node
  // ready, so compute 6 and 1 in turn; relu 2; compute 7 and then the large 5; the concat.
  EXPECT_EQ(launch_order(graph, OrderPolicy::kOpara, costs), (std::vector<NodeId>{0, 8, 3, 4, 9, 6, 1, 2, 7, 5, 10}));
  const Plan plan = make_plan(graph, {StreamPolicy::kOpara, OrderPolicy::kOpara, 0}, costs);
  EXPECT_TRUE(validate(graph, plan).empty());
}

TEST(LaunchOrder, OparaWithoutCostsIsProgramOrder) {
  const Graph graph = random_dag(30, 0.1, 3);
  EXPECT_EQ(launch_order(graph, OrderPolicy::kOpara), topological_order(graph));
}

TEST(LaunchOrder, AlwaysTopologicalOnRandomGraphsAndCosts) {
  std::mt19937_64 random(5);
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const Graph graph = random_dag(25, 0.12, seed, 0.2);
    std::vector<NodeCost> costs(graph.size());
    for (NodeCost& cost : costs) {
      cost.op_class = random() % 2 ? kMem : kComp;
      cost.demand = static_cast<double>(random() % 100);
    }
    EXPECT_TRUE(is_topological_order(graph, launch_order(graph, OrderPolicy::kOpara, costs))) << "seed " << seed;
  }
}

TEST(LaunchOrder, RejectsCostsOfTheWrongSize) {
  const Graph graph = graph_from_edges(3, {});
  EXPECT_THROW(launch_order(graph, OrderPolicy::kOpara, {{kMem, 1}}), Error);
}

class ModelCosts : public ::testing::Test {
 protected:
  void load(const std::string& name, const std::string& extension = "pt") {
    const std::string path = testing::model_path(name, extension);
    graph_ = opara::load(path);
    const ModelSpec spec = read_model_spec(sidecar_path(path));
    const auto tensors = make_inputs(spec.inputs, spec.seed);
    shapes_ = record_shapes(graph_, std::vector<c10::IValue>(tensors.begin(), tensors.end()));
  }
  Graph graph_;
  std::vector<NodeShapes> shapes_;
};

TEST_F(ModelCosts, GoogLeNetConvolutionsAreComputeBoundAndActivationsMemoryBound) {
  OPARA_REQUIRE_MODEL("googlenet");
  load("googlenet");
  const std::vector<NodeCost> costs = estimate_costs(graph_, shapes_);
  std::size_t convolutions = 0;
  std::size_t compute_convolutions = 0;
  for (const Node& node : graph_.nodes()) {
    if (!node.has(kLaunchesKernel)) {
      EXPECT_EQ(costs[node.id].demand, 0) << graph_.describe(node.id);
      continue;
    }
    EXPECT_GT(costs[node.id].demand, 0) << graph_.describe(node.id);
    if (node.kind == "aten::_convolution") {  // what frozen TorchScript makes of conv2d
      ++convolutions;
      compute_convolutions += costs[node.id].op_class == kComp;
      // The weight is folded into the node, yet the estimate sees it.
      ASSERT_GE(shapes_[node.id].arguments.size(), 2u);
      ASSERT_EQ(shapes_[node.id].arguments[1].size(), 1u);
      EXPECT_EQ(shapes_[node.id].arguments[1][0].sizes.size(), 4u);
    }
    if (node.kind == "aten::relu" || node.kind == "aten::relu_" || node.kind == "aten::max_pool2d") {
      EXPECT_EQ(costs[node.id].op_class, kMem) << graph_.describe(node.id);
    }
  }
  EXPECT_GT(convolutions, 50u);
  EXPECT_GT(compute_convolutions, convolutions / 2);
  // The ridge point moves the line: nothing is compute-bound at an absurd ridge, every table
  // compute op is at a tiny one.
  for (const NodeCost& cost : estimate_costs(graph_, shapes_, 1e12)) EXPECT_EQ(cost.op_class, kMem);
  const auto low = estimate_costs(graph_, shapes_, 1e-9);
  for (const Node& node : graph_.nodes()) {
    if (node.kind == "aten::_convolution") {
      EXPECT_EQ(low[node.id].op_class, kComp) << graph_.describe(node.id);
    }
  }
}

TEST_F(ModelCosts, BertMatrixProductsCountTheirFlops) {
  OPARA_REQUIRE_MODEL("bert_base");
  load("bert_base");
  const std::vector<NodeCost> costs = estimate_costs(graph_, shapes_);
  double linear = 0;
  double elementwise = 0;
  for (const Node& node : graph_.nodes()) {
    if (node.kind == "aten::linear") linear = std::max(linear, costs[node.id].demand);
    if (node.kind == "aten::add") elementwise = std::max(elementwise, costs[node.id].demand);
  }
  EXPECT_GT(linear, 0);
  EXPECT_GT(linear, elementwise) << "a 768x3072 projection must outweigh an addition";
}

// Fused recurrent layers take their weights as one list argument: the estimate must see every
// matrix of every layer and direction. recurrent (scripts/opara_models/synthetic.py): 16 steps of
// 32 features; a two-layer LSTM of 48 and a bidirectional GRU of 48.
TEST_F(ModelCosts, RecurrentLayersCountEveryWeightMatrix) {
  OPARA_REQUIRE_MODEL("recurrent");
  constexpr double kRows = 16;  // batch 1 x 16 steps
  constexpr double kFeatures = 32;
  constexpr double kHidden = 48;
  const double lstm_matrices = 4 * kHidden * (kFeatures + kHidden) + 4 * kHidden * (kHidden + kHidden);
  const double gru_matrices = 2 * 3 * kHidden * (kFeatures + kHidden);
  constexpr double kTinyRidge = 1e-6;  // the FLOPs decide the demand
  for (const std::string extension : {"pt", "pt2"}) {
    load("recurrent", extension);
    const std::vector<NodeCost> costs = estimate_costs(graph_, shapes_, kTinyRidge);
    std::map<std::string, double> flops;
    for (const Node& node : graph_.nodes()) {
      if (node.kind != "aten::lstm" && node.kind != "aten::gru") continue;
      EXPECT_EQ(costs[node.id].op_class, kComp) << graph_.describe(node.id);
      flops[node.kind] = costs[node.id].demand * kTinyRidge;
    }
    ASSERT_EQ(flops.size(), 2u) << extension << ": one aten::lstm and one aten::gru node";
    EXPECT_NEAR(flops["aten::lstm"], 2 * kRows * lstm_matrices, 1) << extension;
    EXPECT_NEAR(flops["aten::gru"], 2 * kRows * gru_matrices, 1) << extension;
  }
}

TEST(Costs, WithoutShapesTheTableDecidesAndDemandsAreEqual) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  graph.add_node("aten::conv2d", {x}, {"Tensor"});
  graph.add_node("aten::relu", {x}, {"Tensor"});
  graph.add_node("aten::view", {x}, {"Tensor"}, kView);
  const auto costs = estimate_costs(graph, {});
  EXPECT_EQ(costs[0].op_class, kComp);
  EXPECT_EQ(costs[1].op_class, kMem);
  EXPECT_EQ(costs[0].demand, costs[1].demand);
  EXPECT_EQ(costs[2].demand, 0);
}

class ProfileCosts : public ::testing::Test {
 protected:
  ProfileCosts() {
    const ValueId x = graph_.add_input("x");
    const ValueId y = graph_.add_node("aten::conv2d", {x}, {"Tensor"});
    graph_.add_node("aten::relu", {graph_.node(y).outputs[0]}, {"Tensor"});
  }
  std::string write(const std::string& text) {
    const std::string path = testing::scratch_path("profile.json");
    std::ofstream(path) << text;
    return path;
  }
  Graph graph_;
};

TEST_F(ProfileCosts, ReadsClassAndDemandPerNode) {
  const auto costs = costs_from_profile(graph_, write(R"({"nodes": [
      {"id": 0, "kind": "aten::conv2d", "class": "compute", "demand": 0.75},
      {"id": 1, "kind": "aten::relu", "class": "memory", "demand": 0.25}]})"));
  EXPECT_EQ(costs[0].op_class, kComp);
  EXPECT_EQ(costs[0].demand, 0.75);
  EXPECT_EQ(costs[1].op_class, kMem);
}

TEST_F(ProfileCosts, RejectsAProfileOfAnotherModelNamingTheNode) {
  const std::string path = write(R"({"nodes": [
      {"id": 0, "kind": "aten::linear", "class": "compute", "demand": 1},
      {"id": 1, "kind": "aten::relu", "class": "memory", "demand": 1}]})");
  try {
    costs_from_profile(graph_, path);
    FAIL() << "a profile of another model was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("node 0 is aten::linear in the profile but node 0 (aten::conv2d)"));
    EXPECT_THAT(error.what(), HasSubstr(path));
  }
}

TEST_F(ProfileCosts, RejectsIncompleteMalformedAndMissingProfiles) {
  EXPECT_THROW(costs_from_profile(graph_, write(R"({"nodes": [
      {"id": 0, "kind": "aten::conv2d", "class": "compute", "demand": 1}]})")),
               Error);
  EXPECT_THROW(costs_from_profile(graph_, write(R"({"nodes": [
      {"id": 7, "kind": "aten::conv2d", "class": "compute", "demand": 1}]})")),
               Error);
  EXPECT_THROW(costs_from_profile(graph_, write(R"({"nodes": [
      {"id": 0, "kind": "aten::conv2d", "class": "fast", "demand": 1}]})")),
               Error);
  EXPECT_THROW(costs_from_profile(graph_, write("{not json")), Error);
  EXPECT_THROW(costs_from_profile(graph_, testing::scratch_path("no_such_profile.json")), Error);
}

}  // namespace
}  // namespace opara
