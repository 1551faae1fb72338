#include "graph/op_table.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <utility>

namespace opara {
namespace {

// Operators that do no device work: containers, metadata and shape queries. Views are found from
// the schema instead (their result aliases an input).
constexpr std::array kNoKernel = {
    std::string_view{"prim::ListConstruct"},
    std::string_view{"prim::ListUnpack"},
    std::string_view{"prim::TupleConstruct"},
    std::string_view{"prim::TupleUnpack"},
    std::string_view{"prim::TupleIndex"},
    std::string_view{"prim::DictConstruct"},
    std::string_view{"prim::device"},
    std::string_view{"prim::dtype"},
    std::string_view{"prim::layout"},
    std::string_view{"prim::NumToTensor"},
    std::string_view{"aten::size"},
    std::string_view{"aten::sym_size"},
    std::string_view{"aten::sym_numel"},
    std::string_view{"aten::sym_stride"},
    std::string_view{"aten::dim"},
    std::string_view{"aten::len"},
    std::string_view{"aten::__getitem__"},
    std::string_view{"aten::numel"},
    std::string_view{"aten::stride"},
    std::string_view{"aten::_assert_tensor_metadata"},
    std::string_view{"aten::_assert_scalar"},
    std::string_view{"aten::sym_constrain_range_for_size"},
};

// Operators whose schema says their result aliases the input, but which copy when a view cannot
// express the result (reshape of a transposed tensor, contiguous, a dtype change). They launch a
// kernel then, so the scheduler must treat them as kernel nodes: a "view" that writes on one
// stream and is read on another without an event is a race on the GPU.
constexpr std::array kMayCopy = {
    std::string_view{"aten::reshape"},      std::string_view{"aten::reshape_as"},  std::string_view{"aten::flatten"},
    std::string_view{"aten::contiguous"},   std::string_view{"aten::to"},          std::string_view{"aten::type_as"},
    std::string_view{"aten::resolve_conj"}, std::string_view{"aten::resolve_neg"},
};

// Operators that return views of their input while their schemas declare fresh tensors ("unsafe":
// autograd does not track the aliasing). They launch no kernel, and a write into one piece is a
// write into the input (see Note [Unsafe chunks] in csrc/import/torchscript_import.cpp).
constexpr std::array kUnannotatedViews = {
    std::string_view{"aten::unsafe_chunk"},
    std::string_view{"aten::unsafe_split"},
    std::string_view{"aten::unsafe_split_with_sizes"},
};

// Operators that wait for the device to hand a value to the host, or whose output shape depends
// on the data: they cannot be captured in a CUDA graph and become host steps.
constexpr std::array kNotCapturable = {
    std::string_view{"aten::item"},          std::string_view{"aten::_local_scalar_dense"},
    std::string_view{"aten::nonzero"},       std::string_view{"aten::tolist"},
    std::string_view{"aten::Int"},           std::string_view{"aten::Float"},
    std::string_view{"aten::Bool"},          std::string_view{"aten::IntImplicit"},
    std::string_view{"aten::FloatImplicit"}, std::string_view{"aten::ScalarImplicit"},
    std::string_view{"aten::cpu"},           std::string_view{"aten::equal"},
    std::string_view{"aten::is_nonzero"},    std::string_view{"aten::allclose"},
    std::string_view{"aten::masked_select"}, std::string_view{"aten::unique_dim"},
    std::string_view{"aten::_unique2"},      std::string_view{"aten::unique_consecutive"},
    std::string_view{"aten::bincount"},      std::string_view{"aten::repeat_interleave"},
    std::string_view{"prim::Print"},
};

// Device-side checks: a kernel that fails the stream when a condition is false, with no result
// and no host synchronisation (aten::_assert_scalar, the host-side check of a size, has none).
constexpr std::array kDeviceChecks = {
    std::string_view{"aten::_assert_async"},
};

// Matrix products: compute-bound (kComputeBound), and on cuBLAS on a GPU (OpTraits::uses_blas).
constexpr std::array kMatrixProducts = {
    std::string_view{"aten::linear"}, std::string_view{"aten::matmul"}, std::string_view{"aten::mm"},
    std::string_view{"aten::bmm"},    std::string_view{"aten::addmm"},  std::string_view{"aten::baddbmm"},
    std::string_view{"aten::addbmm"}, std::string_view{"aten::einsum"},
};

// Besides the matrix products, operators whose FLOPs grow faster than their bytes: Opara's
// compute-intensive class. The cost estimate still demotes one to memory-bound when its shapes
// give it little arithmetic per byte.
constexpr std::array kComputeBound = {
    std::string_view{"aten::conv1d"},
    std::string_view{"aten::conv2d"},
    std::string_view{"aten::conv3d"},
    std::string_view{"aten::convolution"},
    std::string_view{"aten::_convolution"},
    std::string_view{"aten::conv_transpose1d"},
    std::string_view{"aten::conv_transpose2d"},
    std::string_view{"aten::conv_transpose3d"},
    std::string_view{"aten::mkldnn_convolution"},
    std::string_view{"aten::cudnn_convolution"},
    std::string_view{"aten::scaled_dot_product_attention"},
    std::string_view{"aten::_scaled_dot_product_flash_attention"},
    std::string_view{"aten::_scaled_dot_product_efficient_attention"},
    std::string_view{"aten::_scaled_dot_product_cudnn_attention"},
    std::string_view{"aten::lstm"},
    std::string_view{"aten::gru"},
    std::string_view{"aten::rnn_tanh"},
    std::string_view{"aten::rnn_relu"},
};

// Besides the matrix products, on cuBLAS on a GPU: see OpTraits::uses_blas. A compiled region is
// counted as one whether or not it multiplies matrices (Inductor's products are extern cuBLAS
// calls): the estimate it feeds bounds memory, so it errs on the larger side.
constexpr std::array kAlsoUsesBlas = {
    std::string_view{"aten::mv"},
    std::string_view{"aten::addmv"},
    std::string_view{"aten::_addmm_activation"},
    std::string_view{"opara::region"},
    std::string_view{"opara::native_region"},
    std::string_view{"opara::aoti_region"},
};

// Allocation and nothing else: see OpTraits::allocates_only.
constexpr std::array kAllocatesOnly = {
    std::string_view{"aten::empty"},
    std::string_view{"aten::empty_like"},
    std::string_view{"aten::empty_strided"},
    std::string_view{"aten::new_empty"},
    std::string_view{"aten::new_empty_strided"},
};

// One plane in, the same plane out (OpTraits::splits_by_plane), and the dimensions of a plane.
// Not the in-place forms (their result is their argument) and not ops that mix planes (softmax
// over channels, batch norm).
constexpr std::pair<std::string_view, int> kSplitsByPlane[] = {
    {"aten::avg_pool2d", 2}, {"aten::max_pool2d", 2},  {"aten::adaptive_avg_pool2d", 2},
    {"aten::avg_pool1d", 1}, {"aten::max_pool1d", 1},  {"aten::sigmoid", 0},
    {"aten::tanh", 0},       {"aten::gelu", 0},        {"aten::silu", 0},
    {"aten::hardswish", 0},  {"aten::hardsigmoid", 0}, {"aten::elu", 0},
    {"aten::exp", 0},
};

template <std::size_t N>
bool contains(const std::array<std::string_view, N>& table, std::string_view kind) {
  return std::find(table.begin(), table.end(), kind) != table.end();
}

}  // namespace

OpTraits op_traits(std::string_view kind) {
  OpTraits traits{!contains(kNoKernel, kind) && !contains(kUnannotatedViews, kind),
                  contains(kNotCapturable, kind),
                  contains(kComputeBound, kind) || contains(kMatrixProducts, kind),
                  contains(kMayCopy, kind),
                  contains(kUnannotatedViews, kind),
                  contains(kAllocatesOnly, kind)};
  const auto split = std::find_if(std::begin(kSplitsByPlane), std::end(kSplitsByPlane),
                                  [kind](const auto& entry) { return entry.first == kind; });
  if (split != std::end(kSplitsByPlane)) {
    traits.splits_by_plane = true;
    traits.plane_dims = split->second;
  }
  traits.checks_on_device = contains(kDeviceChecks, kind);
  traits.uses_blas = contains(kMatrixProducts, kind) || contains(kAlsoUsesBlas, kind);
  return traits;
}

}  // namespace opara
