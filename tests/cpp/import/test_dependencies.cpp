// The edges of an imported graph are complete: every in-place hazard of the `inplace` model is
// ordered, and the graph run in hundreds of random topological orders gives the model's output
// bit for bit. Without the ordering edges some order goes wrong, so the check can fail.
#include <gtest/gtest.h>

#include "exec/eager_executor.h"
#include "exec/outputs.h"
#include "graph/graph_analysis.h"
#include "graph/reachability.h"
#include "model_files.h"
#include "opara/load.h"
#include "tools/model_inputs.h"

namespace opara {
namespace {

std::vector<NodeId> nodes_of_kind(const Graph& graph, const std::string& kind) {
  std::vector<NodeId> found;
  for (const Node& node : graph.nodes()) {
    if (node.kind == kind) found.push_back(node.id);
  }
  return found;
}

// The same nodes and data edges, without any ordering edge.
Graph without_order_edges(const Graph& graph) {
  Graph copy;
  for (ValueId input : graph.inputs()) copy.add_input(graph.value(input).name);
  for (const Node& node : graph.nodes()) {
    std::vector<std::string> types;
    for (ValueId output : node.outputs) types.push_back(graph.value(output).type);
    copy.add_node(node.kind, node.inputs, types, node.flags, node.op);
  }
  for (ValueId output : graph.outputs()) copy.add_output(output);
  return copy;
}

struct Case {
  std::string model;
  std::string extension;
  friend std::ostream& operator<<(std::ostream& out, const Case& c) { return out << c.model << "." << c.extension; }
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.model + "_" + info.param.extension;
}

class InplaceHazards : public ::testing::TestWithParam<std::string> {};

TEST_P(InplaceHazards, EveryReadAndWriteOfAnAliasIsOrdered) {
  OPARA_REQUIRE_MODEL("inplace");
  const Graph graph = load(testing::model_path("inplace", GetParam()));
  const Reachability reach(graph);
  const auto relu = nodes_of_kind(graph, "aten::relu_");
  const auto sums = nodes_of_kind(graph, "aten::sum");
  const auto muls = nodes_of_kind(graph, "aten::mul");
  const auto adds = nodes_of_kind(graph, "aten::add_");
  const auto negs = nodes_of_kind(graph, "aten::neg_");
  const auto copies = nodes_of_kind(graph, "aten::copy_");
  ASSERT_EQ(relu.size(), 1u);
  ASSERT_EQ(sums.size(), 3u);
  ASSERT_FALSE(muls.empty());
  ASSERT_EQ(adds.size(), 1u);
  ASSERT_EQ(negs.size(), 1u);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_TRUE(reach.reaches(muls.front(), relu[0])) << "turned * 2 must read a before relu_ writes it";
  EXPECT_TRUE(reach.reaches(sums[0], relu[0])) << "before_sum reads a through a view before relu_";
  EXPECT_TRUE(reach.reaches(relu[0], sums[1])) << "after_sum must see relu_ through the view";
  EXPECT_TRUE(reach.reaches(adds[0], negs[0])) << "b.add_(a) reads a before turned.neg_() writes it";
  EXPECT_TRUE(reach.reaches(negs[0], sums[2])) << "a.sum() must see the neg_";
  std::size_t ordering = 0;
  for (const Edge& edge : graph.edges()) ordering += edge.kind == EdgeKind::kOrder;
  EXPECT_GT(ordering, 0u);
}

INSTANTIATE_TEST_SUITE_P(BothFormats, InplaceHazards, ::testing::Values("pt", "pt2"));

class RandomOrders : public ::testing::TestWithParam<Case> {};

TEST_P(RandomOrders, EveryTopologicalOrderGivesTheModelsOutputBitwise) {
  const Case& c = GetParam();
  OPARA_REQUIRE_MODEL(c.model);
  const Graph graph = load(testing::model_path(c.model, c.extension));
  const auto [tensors, inputs, expected] = testing::format_reference(c.model, c.extension);
  EagerExecutor executor(graph);
  const int orders = c.model == "inplace" ? 500 : 200;
  for (int seed = 0; seed < orders; ++seed) {
    const auto order = random_topological_order(graph, static_cast<std::uint64_t>(seed));
    ASSERT_TRUE(bitwise_equal(flatten_tensors(executor.run(inputs, order)), expected)) << "order seed " << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, RandomOrders,
                         ::testing::Values(Case{"inplace", "pt"}, Case{"inplace", "pt2"}, Case{"branchy", "pt"},
                                           Case{"branchy", "pt2"}, Case{"multihead_rnn", "pt"}),
                         case_name);

// Note [Unsafe chunks] in torchscript_import.cpp: a TorchScript LSTM cell chunks its gates with
// aten::unsafe_chunk and writes them in place (sigmoid_, tanh_). The ordering edges for those
// writes must stay inside the cell: were the pieces wildcards, every head would wait for every
// other. The random-order test above checks that the edges kept are enough.
TEST(UnsafeChunks, InPlaceWritesOnChunkedGatesDoNotSerialiseIndependentHeads) {
  OPARA_REQUIRE_MODEL("multihead_rnn");
  const Graph graph = load(testing::model_path("multihead_rnn", "pt"));
  std::vector<NodeId> writers;
  for (const Node& node : graph.nodes()) {
    if (node.has(kWritesInput)) writers.push_back(node.id);
  }
  ASSERT_GT(writers.size(), 100u) << "the model no longer writes its gates in place: this test proves nothing";
  // Writers in different heads are unordered; with wildcard pieces most pairs were ordered.
  const Reachability reach(graph);
  std::size_t unordered = 0;
  for (std::size_t i = 0; i < writers.size(); ++i) {
    for (std::size_t j = i + 1; j < writers.size(); ++j) {
      unordered += !reach.reaches(writers[i], writers[j]) && !reach.reaches(writers[j], writers[i]);
    }
  }
  // The model has 8 heads of the same shape (scripts/opara_models/overflow.py): 7 in 8 pairs of
  // writers are in different heads. Every such pair must be unordered.
  const std::size_t pairs = writers.size() * (writers.size() - 1) / 2;
  EXPECT_GE(unordered * 8, pairs * 7) << unordered << " of " << pairs
                                      << " pairs of in-place writers unordered: heads wait for each other";
}

class WithoutOrderingEdges : public ::testing::TestWithParam<std::string> {};

TEST_P(WithoutOrderingEdges, SomeOrderGoesWrong) {
  OPARA_REQUIRE_MODEL("inplace");
  const Graph graph = without_order_edges(load(testing::model_path("inplace", GetParam())));
  const auto [tensors, inputs, expected] = testing::format_reference("inplace", GetParam());
  EagerExecutor executor(graph);
  int wrong = 0;
  for (int seed = 0; seed < 200; ++seed) {
    wrong += !bitwise_equal(flatten_tensors(executor.run(inputs, random_topological_order(graph, seed))), expected);
  }
  EXPECT_GT(wrong, 0) << "data edges alone were enough: the random-order test would prove nothing";
}

INSTANTIATE_TEST_SUITE_P(BothFormats, WithoutOrderingEdges, ::testing::Values("pt", "pt2"));

TEST(Dependencies, PredecessorsKeepArgumentOrder) {
  OPARA_REQUIRE_MODEL("branchy");
  for (const char* extension : {"pt", "pt2"}) {
    const Graph graph = load(testing::model_path("branchy", extension));
    for (const Node& node : graph.nodes()) {
      std::vector<NodeId> data_producers;
      for (ValueId input : node.inputs) {
        const NodeId producer = graph.value(input).producer;
        if (producer != kNoNode &&
            std::find(data_producers.begin(), data_producers.end(), producer) == data_producers.end()) {
          data_producers.push_back(producer);
        }
      }
      ASSERT_GE(node.predecessors.size(), data_producers.size());
      ASSERT_TRUE(std::equal(data_producers.begin(), data_producers.end(), node.predecessors.begin()))
          << graph.describe(node.id);
    }
  }
}

// reshape, contiguous and to alias their input when they can and copy when they cannot; on the GPU
// such a copy is a kernel on some stream, so the scheduler must see a kernel node (with a stream
// and events), while pure views (transpose, view) stay kernel-free.
TEST(Dependencies, OpsThatMayCopyAreKernelNodesAndPureViewsAreNot) {
  OPARA_REQUIRE_MODEL("bert_base");
  for (const char* extension : {"pt", "pt2"}) {
    const Graph graph = load(testing::model_path("bert_base", extension));
    int may_copy = 0;
    int pure_views = 0;
    for (const Node& node : graph.nodes()) {
      if (node.kind == "aten::reshape" || node.kind == "aten::contiguous" || node.kind == "aten::to") {
        ++may_copy;
        EXPECT_TRUE(node.has(kLaunchesKernel)) << graph.describe(node.id);
      } else if (node.kind == "aten::transpose" || node.kind == "aten::view") {
        ++pure_views;
        EXPECT_TRUE(node.has(kView)) << graph.describe(node.id);
        EXPECT_FALSE(node.has(kLaunchesKernel)) << graph.describe(node.id);
      }
    }
    EXPECT_GT(may_copy, 0) << extension;
    EXPECT_GT(pure_views, 0) << extension;
  }
}

}  // namespace
}  // namespace opara
