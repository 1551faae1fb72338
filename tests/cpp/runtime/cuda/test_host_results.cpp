// What a host step hands to the graphs captured after it: results that keep their structure,
// shapes and dtypes fit and are copied into the captured buffers in place (lists and tuples
// element by element); anything else does not fit, and the run goes on eagerly.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <vector>

#include "exec/node_op.h"
#include "runtime/cuda/host_results.h"

namespace opara {
namespace {

c10::IValue tensor_list(std::vector<at::Tensor> tensors) {
  return c10::List<at::Tensor>(std::move(tensors));
}

c10::IValue tuple(std::vector<c10::IValue> elements) {
  return c10::ivalue::Tuple::create(std::move(elements));
}

// Device tensors (stood for by meta tensors, which hold no values) fit by shape and dtype.
at::Tensor on_device(at::IntArrayRef sizes, at::ScalarType dtype = at::kFloat) {
  return at::empty(sizes, at::TensorOptions().device(at::kMeta).dtype(dtype));
}

TEST(HostResults, ResultsFitWhenStructureShapesAndDtypesAgree) {
  const at::Tensor a = on_device({2, 3});
  EXPECT_TRUE(result_fits(a, on_device({2, 3})));
  EXPECT_FALSE(result_fits(a, on_device({3, 2})));
  EXPECT_FALSE(result_fits(a, on_device({2, 3}, at::kDouble)));
  EXPECT_FALSE(result_fits(a, tensor_list({on_device({2, 3})})));

  const c10::IValue pieces = tensor_list({on_device({4}), on_device({2, 2})});
  EXPECT_TRUE(result_fits(pieces, tensor_list({on_device({4}), on_device({2, 2})})));
  EXPECT_FALSE(result_fits(pieces, tensor_list({on_device({4})})));  // a split into fewer pieces
  EXPECT_FALSE(result_fits(pieces, tensor_list({on_device({4}), on_device({4})})));
  EXPECT_FALSE(result_fits(pieces, tuple({on_device({4}), on_device({2, 2})})));  // a tuple is not a list

  const c10::IValue nested = tuple({on_device({1}), c10::IValue(int64_t{3}), pieces});
  EXPECT_TRUE(result_fits(
      nested, tuple({on_device({1}), c10::IValue(int64_t{3}), tensor_list({on_device({4}), on_device({2, 2})})})));
  EXPECT_FALSE(result_fits(
      nested, tuple({on_device({1}), c10::IValue(int64_t{4}), tensor_list({on_device({4}), on_device({2, 2})})})));
}

TEST(HostResults, ACpuTensorAGraphReadsFitsOnlyWithTheValueTheCaptureBakedIn) {
  // A 0-dim CPU scalar (aten::NumToTensor of a host result) is read on the host while capturing.
  const at::Tensor captured = at::scalar_tensor(3.0);
  EXPECT_TRUE(result_fits(captured, at::scalar_tensor(3.0), /*read_by_a_graph=*/true));
  EXPECT_FALSE(result_fits(captured, at::scalar_tensor(4.0), /*read_by_a_graph=*/true));
  EXPECT_FALSE(result_fits(tensor_list({at::zeros({2})}), tensor_list({at::ones({2})}), /*read_by_a_graph=*/true));
  // Read by no graph (a model output, a later host step's input): a buffer like any other.
  EXPECT_TRUE(result_fits(captured, at::scalar_tensor(4.0)));
  EXPECT_TRUE(result_fits(c10::IValue(int64_t{7}), c10::IValue(int64_t{7})));
  EXPECT_FALSE(result_fits(c10::IValue(int64_t{7}), c10::IValue(int64_t{8})));
}

TEST(HostResults, CopiesLandInTheCapturedBuffersElementByElement) {
  const at::Tensor first = at::zeros({4});
  const at::Tensor second = at::zeros({2, 2});
  const c10::IValue slot = tuple({first, c10::IValue(int64_t{3}), tensor_list({second})});
  const void* first_address = first.data_ptr();
  const void* second_address = second.data_ptr();

  const at::Tensor fresh_first = at::arange(4, at::kFloat);
  const at::Tensor fresh_second = at::full({2, 2}, 5.0);
  copy_into_slot(slot, tuple({fresh_first, c10::IValue(int64_t{3}), tensor_list({fresh_second})}));

  EXPECT_TRUE(at::equal(first, fresh_first));
  EXPECT_TRUE(at::equal(second, fresh_second));
  EXPECT_EQ(first.data_ptr(), first_address) << "the graphs read the captured address";
  EXPECT_EQ(second.data_ptr(), second_address);
}

TEST(HostResults, ClonesGiveEveryTensorABufferOfItsOwn) {
  const at::Tensor base = at::arange(6, at::kFloat);
  const std::vector<at::Tensor> views = base.split(3);  // views of one buffer, as a step may return
  const c10::IValue cloned = clone_tensors(tuple({tensor_list(views), base}));
  const auto& elements = cloned.toTupleRef().elements();
  const std::vector<at::Tensor> pieces = elements[0].toTensorVector();
  ASSERT_EQ(pieces.size(), 2u);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_TRUE(at::equal(pieces[i], views[i]));
    EXPECT_NE(pieces[i].data_ptr(), views[i].data_ptr());
  }
  EXPECT_NE(elements[1].toTensor().data_ptr(), base.data_ptr());
  pieces[0].fill_(-1);
  EXPECT_TRUE(at::equal(base, at::arange(6, at::kFloat))) << "writing a clone leaves the original alone";
}

// An undefined tensor (the attention weights nn.MultiheadAttention's fast path does not compute)
// holds nothing: it fits only another, is neither copied nor cloned, and stays where it is.
TEST(HostResults, AnUndefinedTensorFitsOnlyAnotherAndIsLeftAsItIs) {
  const c10::IValue slot = tuple({on_device({2}), at::Tensor()});
  EXPECT_TRUE(result_fits(slot, tuple({on_device({2}), at::Tensor()})));
  EXPECT_FALSE(result_fits(slot, tuple({on_device({2}), on_device({2})})));
  EXPECT_FALSE(result_fits(tuple({on_device({2}), on_device({2})}), slot));
  const at::Tensor first = at::zeros({2});
  copy_into_slot(tuple({first, at::Tensor()}), tuple({at::ones({2}), at::Tensor()}));
  EXPECT_TRUE(at::equal(first, at::ones({2})));
  const c10::IValue cloned = clone_tensors(tuple({first, at::Tensor()}));
  EXPECT_FALSE(cloned.toTupleRef().elements()[1].toTensor().defined());
  const c10::IValue moved = move_tensors(tuple({first, at::Tensor()}), c10::Device(c10::kMeta));
  EXPECT_TRUE(moved.toTupleRef().elements()[0].toTensor().is_meta());
  EXPECT_FALSE(moved.toTupleRef().elements()[1].toTensor().defined());
}

}  // namespace
}  // namespace opara
