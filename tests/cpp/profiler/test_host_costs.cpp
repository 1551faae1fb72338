// The host side of a profile, which runs on any machine: each node's CPU time on CPU copies of
// its inputs, its bytes, its FLOPs, and whether it copied anything; and which nodes the profiler
// must then find device work for.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "exec/record_shapes.h"
#include "model_files.h"
#include "opara/error.h"
#include "opara/load.h"
#include "opara/model_profiler.h"
#include "profiler/host_costs.h"

namespace opara {
namespace {

std::int64_t bytes_of(const std::vector<TensorShape>& tensors) {
  std::int64_t bytes = 0;
  for (const TensorShape& tensor : tensors) bytes += tensor.bytes();
  return bytes;
}

TEST(HostCosts, GoogLeNetTimesBytesFlopsAndCopies) {
  OPARA_REQUIRE_MODEL("googlenet");
  const Graph graph = load(testing::model_path("googlenet", "pt"));
  const testing::FormatReference reference = testing::format_reference("googlenet", "pt");
  const HostCosts costs = measure_host_costs(graph, reference.tensors, 2);
  ASSERT_EQ(costs.cpu_ns.size(), graph.size());
  const std::vector<NodeShapes> shapes = record_shapes(graph, reference.inputs);
  std::size_t convolutions = 0;
  for (const Node& node : graph.nodes()) {
    const NodeId id = node.id;
    // The same bytes the static estimate sees, weights included.
    std::int64_t bytes_in = 0;
    for (const auto& argument : shapes[id].arguments) bytes_in += bytes_of(argument);
    EXPECT_EQ(costs.bytes_in[id], bytes_in) << graph.describe(id);
    EXPECT_EQ(costs.bytes_out[id], bytes_of(shapes[id].outputs)) << graph.describe(id);
    EXPECT_GE(costs.cpu_ns[id], 0) << graph.describe(id);
    if (node.kind == "aten::_convolution") {
      ++convolutions;
      EXPECT_GT(costs.cpu_ns[id], 0) << graph.describe(id);
      ASSERT_TRUE(costs.flops[id].has_value()) << graph.describe(id);
      EXPECT_GT(*costs.flops[id], static_cast<double>(costs.bytes_out[id])) << "at least 2 x K FLOPs per output";
      EXPECT_GT(costs.bytes_in[id], shapes[id].arguments[0][0].bytes()) << "the weight counts";
      EXPECT_FALSE(costs.returns_only_aliases[id]);
      EXPECT_TRUE(expects_device_work(node, true, costs.returns_only_aliases[id]));
    }
    if (node.kind == "aten::relu_") {
      // In place: returns its input, yet writes it.
      EXPECT_TRUE(costs.returns_only_aliases[id]) << graph.describe(id);
      EXPECT_TRUE(expects_device_work(node, true, costs.returns_only_aliases[id])) << graph.describe(id);
      EXPECT_FALSE(costs.flops[id].has_value());
    }
    if (node.kind == "aten::flatten") {
      // [1, 1024, 1, 1] -> [1, 1024] is a view: the op table's "may copy" did not copy.
      EXPECT_TRUE(costs.returns_only_aliases[id]) << graph.describe(id);
      EXPECT_FALSE(expects_device_work(node, true, costs.returns_only_aliases[id])) << graph.describe(id);
    }
    if (!node.has(kLaunchesKernel)) {
      EXPECT_FALSE(expects_device_work(node, true, false)) << graph.describe(id);
    }
  }
  EXPECT_EQ(convolutions, 57u);
}

TEST(HostCosts, ReportsEachRunForAProgressBar) {
  OPARA_REQUIRE_MODEL("branchy");
  const Graph graph = load(testing::model_path("branchy", "pt"));
  const testing::FormatReference reference = testing::format_reference("branchy", "pt");
  for (int runs : {0, 1, 3}) {
    int reported = 0;
    measure_host_costs(graph, reference.tensors, runs, [&reported] { ++reported; });
    EXPECT_EQ(reported, std::max(runs, 1)) << "runs " << runs << " (at least one run is made)";
  }
}

TEST(HostCosts, ANodeThatTouchesNoDeviceTensorIsNotExpectedToLaunchAnything) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const Node& node = graph.node(graph.add_node("aten::Int", {x}, {"int"}, kLaunchesKernel | kNotCapturable));
  EXPECT_FALSE(expects_device_work(node, /*touches_device=*/false, /*returns_only_aliases=*/false));
  EXPECT_TRUE(expects_device_work(node, /*touches_device=*/true, /*returns_only_aliases=*/false));
}

TEST(HostCosts, AnAllocationAloneIsNotExpectedToLaunchAnything) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const Node& empty = graph.node(graph.add_node("aten::empty_like", {x}, {"buffer"}, kLaunchesKernel));
  EXPECT_FALSE(expects_device_work(empty, /*touches_device=*/true, /*returns_only_aliases=*/false));
  const Node& zeros = graph.node(graph.add_node("aten::zeros_like", {x}, {"zeros"}, kLaunchesKernel));
  EXPECT_TRUE(expects_device_work(zeros, /*touches_device=*/true, /*returns_only_aliases=*/false)) << "a fill";
}

TEST(HostCosts, ANodeThatFailsIsNamed) {
  OPARA_REQUIRE_MODEL("branchy");
  const Graph graph = load(testing::model_path("branchy", "pt"));
  try {
    measure_host_costs(graph, {at::zeros({1, 5, 7, 7})}, 1);  // the wrong channel count
    FAIL() << "a failing node was not reported";
  } catch (const NodeError& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("branchy_b1.pt"));
  }
}

TEST(ModelProfiler, WithoutAGpuSaysSo) {
  Graph graph;
  graph.add_input("x");
  try {
    ModelProfiler profiler(graph, c10::kCPU);
    FAIL() << "a CPU profiler was made";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("CUDA GPU"));
  }
}

}  // namespace
}  // namespace opara
