#include "opara/eager_executor.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <algorithm>

#include "node_op.h"
#include "opara/error.h"
#include "opara/graph_analysis.h"

namespace opara {

EagerExecutor::EagerExecutor(const Graph& graph, c10::Device device)
    : graph_(graph), device_(device), program_order_(topological_order(graph)) {
  ops_.reserve(graph_.size());
  for (const Node& node : graph_.nodes()) {
    if (!node.op)
      throw Error(fmt::format("{}: {} has no operation to run", graph_.source_path, graph_.describe(node.id)));
    ops_.push_back(device.is_cpu() ? node.op : node.op->to(device));
  }
}

std::vector<c10::IValue> EagerExecutor::run(const std::vector<c10::IValue>& inputs) {
  return run(inputs, program_order_);
}

std::vector<c10::IValue> EagerExecutor::run(const std::vector<c10::IValue>& inputs, const std::vector<NodeId>& order) {
  if (inputs.size() != graph_.inputs().size()) {
    std::string names;
    for (ValueId input : graph_.inputs()) names += (names.empty() ? "" : ", ") + graph_.value(input).name;
    throw Error(fmt::format("{}: the model takes {} inputs ({}), {} were given", graph_.source_path,
                            graph_.inputs().size(), names, inputs.size()));
  }
  TORCH_INTERNAL_ASSERT(is_topological_order(graph_, order), "opara bug: EagerExecutor given a non-topological order");

  c10::AutoGradMode no_grad(false);  // inference: like the reference forward, record no autograd history
  std::vector<c10::IValue> values(graph_.values().size());
  // Uses left before each value can be freed; graph inputs and outputs are never freed here.
  std::vector<std::size_t> uses_left(graph_.values().size(), 0);
  std::vector<bool> pinned(graph_.values().size(), false);
  for (const Value& value : graph_.values()) uses_left[value.id] = value.users.size();
  for (ValueId output : graph_.outputs()) pinned[output] = true;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const ValueId id = graph_.inputs()[i];
    values[id] = inputs[i].isTensor() ? c10::IValue(inputs[i].toTensor().to(device_)) : inputs[i];
    pinned[id] = true;
  }

  std::size_t live = 0;
  peak_live_values_ = 0;
  std::vector<c10::IValue> stack;
  std::vector<c10::IValue> observed_inputs;
  for (NodeId id : order) {
    const Node& node = graph_.node(id);
    stack.clear();
    for (ValueId input : node.inputs) stack.push_back(values[input]);
    if (observer_) observed_inputs = stack;
    run_node(graph_, id, *ops_[id], stack);
    if (observer_) observer_(id, observed_inputs, stack);
    for (std::size_t i = 0; i < node.outputs.size(); ++i) {
      const ValueId output = node.outputs[i];
      values[output] = std::move(stack[i]);
      ++live;
    }
    peak_live_values_ = std::max(peak_live_values_, live);
    // Free what this node read for the last time, and outputs nobody reads.
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const ValueId input = node.inputs[k];
      // Value::users lists a node once even when it reads the value twice.
      if (std::find(node.inputs.begin(), node.inputs.begin() + k, input) != node.inputs.begin() + k) continue;
      if (--uses_left[input] == 0 && !pinned[input]) {
        values[input] = c10::IValue();
        --live;
      }
    }
    for (ValueId output : node.outputs) {
      if (uses_left[output] == 0 && !pinned[output]) {
        values[output] = c10::IValue();
        --live;
      }
    }
  }

  std::vector<c10::IValue> outputs;
  outputs.reserve(graph_.outputs().size());
  for (ValueId output : graph_.outputs()) outputs.push_back(values[output]);
  return outputs;
}

}  // namespace opara
