// Where a node's constants and a model's inputs go on the device an executor runs on: every device
// a graph names (cpu for one exported on the CPU, cuda:0 for one exported from CUDA tensors)
// becomes the executor's, and a CPU scalar input of a CUDA model stays a CPU scalar, as eager
// PyTorch takes it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "exec/node_op.h"
#include "opara/error.h"

namespace opara {
namespace {

// An operation that leaves `outputs` tensors on the stack, whatever its node declares.
class LeavesTensors : public NodeOp {
 public:
  explicit LeavesTensors(std::size_t outputs) : outputs_(outputs) {}
  void run(std::vector<c10::IValue>& stack) const override { stack.assign(outputs_, at::zeros({1})); }
  [[nodiscard]] std::shared_ptr<const NodeOp> to(c10::Device /*device*/) const override {
    return std::make_shared<LeavesTensors>(outputs_);
  }

 private:
  std::size_t outputs_;
};

// The importers make each node's operation from the node itself, so a count that differs from
// the graph's is a bug in opara, not in the model.
TEST(RunNode, AnOperationLeavingTheWrongNumberOfValuesIsAnInternalError) {
  Graph graph;
  graph.source_path = "model.pt2";
  const ValueId x = graph.add_input("x");
  const NodeId relu = graph.add_node("aten::relu", {x}, {"Tensor"});
  std::vector<c10::IValue> stack{at::ones({1})};
  run_node(graph, relu, LeavesTensors(1), stack);
  EXPECT_EQ(stack.size(), 1u);
  EXPECT_THAT([&] { run_node(graph, relu, LeavesTensors(2), stack); },
              ::testing::ThrowsMessage<InternalError>(
                  ::testing::HasSubstr("model.pt2: node 0 (aten::relu) produced 2 values, the graph expects 1")));
}

c10::IValue tuple(std::vector<c10::IValue> elements) {
  return c10::ivalue::Tuple::create(std::move(elements));
}

TEST(NodeOpDevices, EveryDeviceConstantBecomesTheExecutorsDevice) {
  const c10::Device cpu(c10::kCPU);
  const c10::Device meta(c10::kMeta);
  for (const c10::Device named : {c10::Device(c10::kCUDA, 0), c10::Device(c10::kCUDA, 1), cpu}) {
    EXPECT_EQ(move_tensors(named, cpu).toDevice(), cpu) << named;
    EXPECT_EQ(move_tensors(named, meta).toDevice(), meta) << named;
  }
  // Inside lists and tuples too; other constants stay as they are.
  const c10::IValue moved = move_tensors(tuple({c10::Device(c10::kCUDA, 0), 3, std::string("cuda:0")}), cpu);
  const auto& elements = moved.toTupleRef().elements();
  EXPECT_EQ(elements[0].toDevice(), cpu);
  EXPECT_EQ(elements[1].toInt(), 3);
  EXPECT_EQ(elements[2].toStringRef(), "cuda:0");
}

TEST(NodeOpDevices, WrappedNumbersStayCpuScalars) {
  at::Tensor wrapped = at::scalar_to_tensor(2.5);
  wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
  const at::Tensor moved = move_tensors(wrapped, c10::Device(c10::kMeta)).toTensor();
  EXPECT_TRUE(moved.is_cpu());
  EXPECT_TRUE(moved.unsafeGetTensorImpl()->is_wrapped_number());
}

TEST(NodeOpDevices, ACpuScalarInputOfACudaModelStaysOnTheCpu) {
  const at::Tensor scalar = at::scalar_tensor(0.5, at::kDouble);
  const c10::Device cuda(c10::kCUDA, 0);
  EXPECT_TRUE(place_input(scalar, cuda).is_same(scalar));  // no copy, no CUDA call
  const at::Tensor copied = place_input(scalar, cuda, /*copy=*/true);
  EXPECT_TRUE(copied.is_cpu());
  EXPECT_FALSE(copied.is_alias_of(scalar));
  // Anything else goes where the model runs (meta stands in for a device here).
  EXPECT_TRUE(place_input(at::ones({2}), c10::Device(c10::kMeta)).is_meta());
  EXPECT_TRUE(place_input(scalar, c10::Device(c10::kMeta)).is_meta());
}

}  // namespace
}  // namespace opara
