// The peers' automatic schedulers as their code does them: TensorRT-LLM's list schedule
// (trtllm_streams.cpp) and apex torchsched's critical path plus round-robin (torchsched_streams.cpp),
// on small graphs worked by hand from their source.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graph/graph_analysis.h"
#include "opara/plan.h"
#include "schedule/kernel_dag.h"
#include "schedule/stages.h"

namespace opara {
namespace {

// A graph written node by node: each node a kind and the nodes it reads (none: the input).
struct Spec {
  std::string kind;
  std::vector<NodeId> reads;
  std::uint32_t flags = kLaunchesKernel;
};

Graph graph_of(const std::vector<Spec>& nodes, const std::vector<NodeId>& outputs) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  for (const Spec& spec : nodes) {
    std::vector<ValueId> inputs;
    for (NodeId read : spec.reads) inputs.push_back(graph.node(read).outputs[0]);
    if (inputs.empty()) inputs.push_back(x);
    graph.add_node(spec.kind, inputs, {"Tensor"}, spec.flags);
  }
  for (NodeId output : outputs) graph.add_output(graph.node(output).outputs[0]);
  return graph;
}

StreamAssignment trtllm(const Graph& graph, int max_streams = 0) {
  return trtllm_streams(graph, kernel_dag(graph), topological_order(graph), max_streams);
}

StreamAssignment torchsched(const Graph& graph, int max_streams = 0) {
  return torchsched_streams(kernel_dag(graph), topological_order(graph), max_streams);
}

TEST(TrtllmStreams, TheGemmPathKeepsStreamZeroAndSideWorkTakesAnIdleStream) {
  // 0 mm -> 1 mm -> 3 add <- 2 relu. Weights 10, 10, 1, 1; distances 12, 2, 2, 1. 0 and 1 run on
  // stream 0 until 20; 2 is ready at 0, when stream 1 is idle; 3 starts at 20 on stream 0.
  const Graph graph = graph_of({{"aten::mm", {}}, {"aten::mm", {0}}, {"aten::relu", {}}, {"aten::add", {1, 2}}}, {3});
  EXPECT_EQ(trtllm_order(graph), (std::vector<NodeId>{0, 1, 2, 3}));
  const StreamAssignment streams = trtllm(graph);
  EXPECT_EQ(streams.stream_of, (std::vector<int>{0, 0, 1, 0}));
  EXPECT_EQ(streams.stream_count, 2);
}

TEST(TrtllmStreams, NoIdleStreamMeansTheOneThatFreesSoonestAndThreeAtMost) {
  // Four GEMMs ready at 0 and a cat: the first three take streams 0, 1 and 2 (each busy until 10),
  // the fourth the first of them to free (stream 0, until 20); the cat, ready at 20, the first
  // stream idle by then: stream 0.
  const Graph graph = graph_of(
      {{"aten::mm", {}}, {"aten::mm", {}}, {"aten::mm", {}}, {"aten::mm", {}}, {"aten::cat", {0, 1, 2, 3}}}, {4});
  EXPECT_EQ(trtllm(graph).stream_of, (std::vector<int>{0, 1, 2, 0, 0}));
  EXPECT_EQ(trtllm(graph).stream_count, 3);
  const StreamAssignment two = trtllm(graph, /*max_streams=*/2);
  EXPECT_EQ(two.stream_of, (std::vector<int>{0, 1, 0, 1, 0}));
  EXPECT_EQ(trtllm(graph, /*max_streams=*/1).stream_count, 1);
}

TEST(TrtllmStreams, OnlyAtenMmWeighsAsAGemm) {
  // 0 relu -> 1 (GEMM or linear) -> 5 cat; 2 -> 3 -> 4 linears -> 5 cat. With aten::mm the relu's
  // distance is 10 + 2 and it is taken first; with aten::linear (weight 1, as in its code) 3, below
  // the first linear's 4.
  for (const char* gemm : {"aten::mm", "aten::linear"}) {
    const Graph graph = graph_of({{"aten::relu", {}},
                                  {gemm, {0}},
                                  {"aten::linear", {}},
                                  {"aten::linear", {2}},
                                  {"aten::linear", {3}},
                                  {"aten::cat", {1, 4}}},
                                 {5});
    const std::vector<NodeId> order = trtllm_order(graph);
    EXPECT_EQ(order.front(), std::string(gemm) == "aten::mm" ? 0 : 2) << gemm;
  }
}

TEST(TrtllmStreams, AViewStaysOnItsProducersStreamAndKeepsNone) {
  // 0 mm, 1 relu (side stream), 2 view of 1 (weight 0: stream 1 in the schedule, no stream in the
  // plan), 3 add on stream 0.
  const Graph graph =
      graph_of({{"aten::mm", {}}, {"aten::relu", {}}, {"aten::view", {1}, kView}, {"aten::add", {0, 2}}}, {3});
  const StreamAssignment streams = trtllm(graph);
  EXPECT_EQ(streams.stream_of, (std::vector<int>{0, 1, kNoStream, 0}));
}

TEST(TrtllmStreams, DistancesStopAtANodeWithAUserThatReachesNoOutput) {
  // 0 relu -> 1 relu -> 2 mm -> output, and 1 -> 3, whose result no output reads. Node 1 gets
  // its distance from the GEMM (11) but, one user short, never passes one on: node 0 keeps 0, so
  // the independent node 4 (distance 1) is taken before it, as its code does.
  const Graph graph = graph_of(
      {{"aten::relu", {}}, {"aten::relu", {0}}, {"aten::mm", {1}}, {"aten::relu", {1}}, {"aten::relu", {}}}, {2, 4});
  EXPECT_EQ(trtllm_order(graph).front(), 4);
}

TEST(TorchschedStreams, TheDeepestPathOnStreamZeroTheRestRoundRobin) {
  // a0 -> b1 -> c4 and d2 -> e3 -> c4: the walk from a reaches c at depth 3 first; d and e go to
  // streams 1 and 2 in program order.
  const Graph graph = graph_of(
      {{"aten::relu", {}}, {"aten::relu", {0}}, {"aten::relu", {}}, {"aten::relu", {2}}, {"aten::add", {1, 3}}}, {4});
  EXPECT_EQ(torchsched(graph).stream_of, (std::vector<int>{0, 0, 1, 2, 0}));
}

TEST(TorchschedStreams, SideNodesCycleOverTheOtherStreamsWhateverTheirDependencies) {
  // A chain of three (the critical path) and nine single nodes beside it: streams 1..7, then 1, 2.
  std::vector<Spec> nodes = {{"aten::relu", {}}, {"aten::relu", {0}}, {"aten::relu", {1}}};
  for (int side = 0; side < 9; ++side) nodes.push_back({"aten::relu", {}});
  const Graph graph = graph_of(nodes, {2});
  const StreamAssignment eight = torchsched(graph);
  EXPECT_EQ(eight.stream_count, 8);
  EXPECT_EQ(eight.stream_of, (std::vector<int>{0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 1, 2}));
  const StreamAssignment three = torchsched(graph, /*max_streams=*/3);
  EXPECT_EQ(three.stream_of, (std::vector<int>{0, 0, 0, 1, 2, 1, 2, 1, 2, 1, 2, 1}));
  EXPECT_EQ(torchsched(graph, /*max_streams=*/1).stream_count, 1);
}

TEST(TorchschedStreams, OfEqualPathsTheFirstFoundIsCritical) {
  // Two chains of two: the walk from node 0 reaches depth 2 first.
  const Graph graph =
      graph_of({{"aten::relu", {}}, {"aten::relu", {}}, {"aten::relu", {0}}, {"aten::relu", {1}}}, {2, 3});
  EXPECT_EQ(torchsched(graph).stream_of, (std::vector<int>{0, 1, 0, 2}));
}

TEST(PeerPolicies, MakePlanGivesThemTheirStreamCountAndKeepsEveryStream) {
  const Graph graph = graph_of(
      {{"aten::mm", {}}, {"aten::mm", {}}, {"aten::mm", {}}, {"aten::mm", {}}, {"aten::cat", {0, 1, 2, 3}}}, {4});
  PlanOptions options{StreamPolicy::kTrtllm, OrderPolicy::kTrtllm};
  options.payoff = StreamPayoff{1e9, 1};  // no stream of opara's could pay; the peer's stand
  EXPECT_EQ(make_plan(graph, options).stream_count, 3);
  options.max_streams = 4;
  EXPECT_EQ(make_plan(graph, options).stream_count, 4);
  options.streams = StreamPolicy::kTorchsched;
  options.max_streams = 0;
  EXPECT_EQ(make_plan(graph, options).stream_count, 4);  // the cat's path, then three side nodes
  EXPECT_TRUE(validate(graph, make_plan(graph, options)).empty());
}

}  // namespace
}  // namespace opara
