#include "runtime/cpu/node_split.h"

#include <ATen/ATen.h>

#include <numeric>

#include "graph/op_table.h"
#include "support/internal_assert.h"

namespace opara {
namespace {

// Cuts fall on multiples of this many elements: a multiple of every vector width ATen's CPU
// kernels loop in (16 floats for AVX-512, twice that for their unrolled pairs).
constexpr std::int64_t kCutAlignment = 64;

}  // namespace

std::optional<NodeSplit> split_node(const Graph& graph, NodeId id, const std::vector<c10::IValue>& inputs, int pieces) {
  const Node& node = graph.node(id);
  const OpTraits traits = op_traits(node.kind);
  if (pieces < 2 || !traits.splits_by_plane || node.outputs.size() != 1 || inputs.empty() || !inputs[0].isTensor()) {
    return std::nullopt;
  }
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i].isTensor() || inputs[i].isTensorList()) return std::nullopt;
  }
  const at::Tensor& tensor = inputs[0].toTensor();
  // Dense CPU floating-point data only: not mkldnn or quantized tensors, whose layouts and
  // kernels this reasoning does not cover.
  if (!tensor.defined() || !tensor.is_cpu() || tensor.layout() != at::kStrided || tensor.is_quantized() ||
      !at::isFloatingType(tensor.scalar_type()) || !tensor.is_contiguous()) {
    return std::nullopt;
  }
  // Only the dimensions before a plane may be cut: batch and channels of [N, C, H, W], channels
  // alone of an unbatched [C, H, W] (its dimension 1 is a row of the plane).
  const std::int64_t cuttable = tensor.dim() - traits.plane_dims;
  NodeSplit split;
  if (cuttable >= 1 && tensor.size(0) > 1) {
    split.dim = 0;
  } else if (cuttable >= 2 && tensor.size(0) == 1) {
    split.dim = 1;
  } else {
    return std::nullopt;
  }
  const std::int64_t size = tensor.size(split.dim);
  // Every dimension before `dim` has size 1: the elements of one index along it are contiguous.
  const std::int64_t per_index = size > 0 ? tensor.numel() / size : 0;
  if (per_index <= 0) return std::nullopt;
  const std::int64_t step = kCutAlignment / std::gcd(per_index, kCutAlignment);
  split.bounds.push_back(0);
  for (int piece = 1; piece < pieces; ++piece) {
    const std::int64_t cut = size * piece / pieces / step * step;
    if (cut > split.bounds.back() && cut < size) split.bounds.push_back(cut);
  }
  split.bounds.push_back(size);
  if (split.pieces() < 2) return std::nullopt;
  return split;
}

void SplitOutput::run_piece(const Graph& graph, NodeId id, const NodeOp& op, const std::vector<c10::IValue>& inputs,
                            int piece) {
  const std::int64_t begin = split_.bounds[static_cast<std::size_t>(piece)];
  const std::int64_t length = split_.bounds[static_cast<std::size_t>(piece) + 1] - begin;
  std::vector<c10::IValue> stack = inputs;
  stack[0] = inputs[0].toTensor().narrow(split_.dim, begin, length);
  run_node(graph, id, op, stack);
  OPARA_ASSERT(stack.size() == 1 && stack[0].isTensor() && stack[0].toTensor().dim() > split_.dim &&
                   stack[0].toTensor().size(split_.dim) == length,
               "{} split along dimension {} did not return one piece of {} there (OpTraits::splits_by_plane is "
               "wrong for it)",
               graph.describe(id), split_.dim, length);
  const at::Tensor result = stack[0].toTensor();
  at::Tensor output;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!output_.defined()) {
      std::vector<std::int64_t> sizes = result.sizes().vec();
      sizes[static_cast<std::size_t>(split_.dim)] = split_.bounds.back();
      output_ = at::empty(sizes, result.options());
    }
    output = output_;
  }
  output.narrow(split_.dim, begin, length).copy_(result);
}

at::Tensor SplitOutput::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::move(output_);
}

}  // namespace opara
