#include "exec/node_op.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <string_view>

#include "exec/first_line.h"
#include "exec/outputs.h"
#include "opara/error.h"
#include "support/internal_assert.h"

namespace opara {

void run_node(const Graph& graph, NodeId id, const NodeOp& op, std::vector<c10::IValue>& stack) {
  // A graph built in memory has no file to name.
  const std::string_view where = graph.source_path.empty() ? std::string_view("graph") : graph.source_path;
  try {
    op.run(stack);
  } catch (const InternalError&) {
    throw;  // a bug in opara, not the node's failure
  } catch (const std::exception& error) {
    throw NodeError(fmt::format("{}: {} failed: {}", where, graph.describe(id), first_line(error)), id);
  }
  const std::size_t expected = graph.node(id).outputs.size();
  OPARA_ASSERT(stack.size() == expected, "{}: {} produced {} values, the graph expects {}", where, graph.describe(id),
               stack.size(), expected);
}

bool holds_cuda_tensors(const c10::IValue& value) {
  const std::vector<at::Tensor> held = flatten_tensors({value});
  return std::any_of(held.begin(), held.end(), [](const at::Tensor& tensor) { return tensor.is_cuda(); });
}

c10::IValue map_leaves(const c10::IValue& value, const std::function<c10::IValue(const c10::IValue&)>& leaf) {
  if (value.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& tensor : value.toTensorVector()) list.push_back(leaf(tensor).toTensor());
    return list;
  }
  if (value.isList()) {
    auto list = value.toList();
    c10::impl::GenericList mapped(list.elementType());
    for (const c10::IValue& element : list) mapped.push_back(map_leaves(element, leaf));
    return mapped;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const c10::IValue& element : value.toTupleRef().elements()) elements.push_back(map_leaves(element, leaf));
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  return leaf(value);
}

c10::IValue move_tensors(const c10::IValue& value, c10::Device device) {
  return map_leaves(value, [device](const c10::IValue& leaf) -> c10::IValue {
    if (leaf.isTensor()) {
      // Wrapped numbers (Python scalars made tensors) stay CPU scalars: moving would drop the flag
      // that keeps them from taking part in type promotion as real tensors.
      const at::Tensor& tensor = leaf.toTensor();
      // An undefined tensor (attention weights not computed) has no device to leave.
      if (!tensor.defined() || tensor.unsafeGetTensorImpl()->is_wrapped_number()) return leaf;
      return c10::IValue(tensor.to(device));
    }
    // Tracing and export record the example's device (cpu, or cuda:0 for a graph exported from
    // CUDA tensors) in factory calls and checks (arange, zeros, _assert_tensor_metadata, to): on
    // another device they must create and expect tensors there, or the next op mixes devices.
    if (leaf.isDevice()) return device;
    return leaf;
  });
}

std::vector<std::shared_ptr<const NodeOp>> ops_on_device(const Graph& graph, c10::Device device) {
  std::vector<std::shared_ptr<const NodeOp>> ops;
  ops.reserve(graph.size());
  for (const Node& node : graph.nodes()) {
    if (!node.op)
      throw Error(fmt::format("{}: {} has no operation to run", graph.source_path, graph.describe(node.id)));
    ops.push_back(node.op->to(device));
  }
  return ops;
}

at::Tensor place_input(const at::Tensor& tensor, c10::Device device, bool copy) {
  if (!tensor.defined()) return tensor;
  const bool cpu_scalar = device.is_cuda() && tensor.is_cpu() && tensor.dim() == 0;
  return tensor.to(cpu_scalar ? tensor.device() : device, /*non_blocking=*/false, copy);
}

}  // namespace opara
