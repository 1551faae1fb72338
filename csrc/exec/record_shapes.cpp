#include "exec/record_shapes.h"

#include <ATen/ATen.h>

#include "exec/eager_executor.h"
#include "exec/node_op.h"
#include "exec/node_shapes.h"

namespace opara {
namespace {

void collect(const c10::IValue& value, std::vector<TensorShape>& into) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    // An undefined tensor (the attention weights nn.MultiheadAttention's fast path does not
    // compute, an absent optional argument) has no sizes or dtype: it holds no bytes, and keeps
    // its place so that outputs still line up with the node's values.
    if (!tensor.defined()) {
      into.push_back(TensorShape{{0}, 0});
      return;
    }
    into.push_back(TensorShape{tensor.sizes().vec(), static_cast<std::int64_t>(tensor.element_size())});
  } else if (value.isTensorList() || value.isList() || value.isTuple()) {
    const auto elements = value.isTuple() ? value.toTupleRef().elements().vec() : value.toListRef().vec();
    for (const c10::IValue& element : elements) collect(element, into);
  }
}

}  // namespace

NodeShapes node_shapes(const NodeOp& op, const std::vector<c10::IValue>& inputs,
                       const std::vector<c10::IValue>& outputs) {
  NodeShapes shapes;
  for (const c10::IValue& argument : op.call_arguments(inputs)) collect(argument, shapes.arguments.emplace_back());
  for (const c10::IValue& output : outputs) collect(output, shapes.outputs);
  return shapes;
}

std::vector<NodeShapes> record_shapes(const Graph& graph, const std::vector<c10::IValue>& inputs, c10::Device device) {
  std::vector<NodeShapes> shapes(graph.size());
  EagerExecutor executor(graph, device);
  executor.set_observer(
      [&](NodeId id, const std::vector<c10::IValue>& node_inputs, const std::vector<c10::IValue>& outputs) {
        shapes[id] = node_shapes(*graph.node(id).op, node_inputs, outputs);
      });
  executor.run(inputs);
  return shapes;
}

}  // namespace opara
