// Which imported nodes may be captured in a CUDA graph: a host synchronisation (.item()) may not,
// a device-side assert may (aten::_assert_async launches a kernel and, on CUDA, does not wait for
// it). TorchScript drops such an assert as dead code; torch.export keeps it (tests/data/asserts.pt2).
// On a GPU (skipped without one) a model whose only check is such an assert is one captured graph
// with no host step, and gives the module's output.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <string>

#include "exec/eager_executor.h"
#include "exec/outputs.h"
#include "model_files.h"
#include "opara/compiled_model.h"
#include "opara/load.h"

namespace opara {
namespace {

const Node& only_node_of_kind(const Graph& graph, const std::string& kind) {
  const Node* found = nullptr;
  for (const Node& node : graph.nodes()) {
    if (node.kind == kind) {
      EXPECT_EQ(found, nullptr) << "two " << kind << " nodes";
      found = &node;
    }
  }
  if (!found) throw std::runtime_error("no " + kind + " node in " + graph.source_path);
  return *found;
}

TEST(CapturableOps, ADeviceSideAssertIsCapturedAndItemIsNot) {
  const Graph asserts = load(testing::fixture_path("asserts.pt2"));
  const Node& check = only_node_of_kind(asserts, "aten::_assert_async");
  EXPECT_TRUE(check.has(kLaunchesKernel));
  EXPECT_FALSE(check.has(kNotCapturable));
  const Graph item = load(testing::fixture_path("item.pt"));
  EXPECT_TRUE(only_node_of_kind(item, "aten::item").has(kNotCapturable));
}

TEST(CapturableOps, ADeviceSideAssertRunsAndFailsOnTheCpu) {
  const Graph graph = load(testing::fixture_path("asserts.pt2"));
  EagerExecutor eager(graph, c10::kCPU);
  const at::Tensor x = at::rand({4, 8});  // relu(x) + 1 < 2: the check holds
  EXPECT_TRUE(at::equal(flatten_tensors(eager.run({x})).at(0), (at::relu(x) + 1.0) * 2.0));
  EXPECT_ANY_THROW(eager.run({at::full({4, 8}, 20.0)}));  // 21 is not below 10
}

TEST(CapturableOps, OnTheGpuADeviceSideAssertStaysInTheGraph) {
  OPARA_REQUIRE_GPU();
  const std::string path = testing::fixture_path("asserts.pt2");
  const at::Tensor x = at::rand({4, 8});
  Options options;
  options.device = c10::Device(c10::kCUDA, 0);
  const CompiledModel compiled = compile(path, {x.cuda()}, options);
  EXPECT_EQ(compiled.stats().segments, 1u);
  EXPECT_EQ(compiled.stats().host_nodes, 0u);
  EXPECT_TRUE(at::allclose(compiled.run({x.cuda()}).at(0).cpu(), (at::relu(x) + 1.0) * 2.0));
}

}  // namespace
}  // namespace opara
