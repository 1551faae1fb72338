// Where a node's constants and a model's inputs go on the device an executor runs on: every device
// a graph names (cpu for one exported on the CPU, cuda:0 for one exported from CUDA tensors)
// becomes the executor's, and a CPU scalar input of a CUDA model stays a CPU scalar, as eager
// PyTorch takes it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "exec/node_op.h"

namespace opara {
namespace {

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
