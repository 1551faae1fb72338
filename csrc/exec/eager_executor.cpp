#include "exec/eager_executor.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <algorithm>

#include "exec/node_op.h"
#include "exec/value_lifetimes.h"
#include "graph/graph_analysis.h"
#include "opara/error.h"
#include "support/internal_assert.h"

namespace opara {

EagerExecutor::EagerExecutor(const Graph& graph, c10::Device device)
    : graph_(graph), device_(device), ops_(ops_on_device(graph, device)), program_order_(topological_order(graph)) {}

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
  OPARA_ASSERT(is_topological_order(graph_, order), "EagerExecutor given a non-topological order");

  c10::AutoGradMode no_grad(false);  // inference: like the reference forward, record no autograd history
  std::vector<c10::IValue> values(graph_.values().size());
  ValueLifetimes lifetimes(graph_);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    values[graph_.inputs()[i]] =
        inputs[i].isTensor() ? c10::IValue(place_input(inputs[i].toTensor(), device_)) : inputs[i];
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
    if (before_node_) before_node_(id);
    run_node(graph_, id, *ops_[id], stack);
    if (observer_) observer_(id, observed_inputs, stack);
    for (std::size_t i = 0; i < node.outputs.size(); ++i) {
      const ValueId output = node.outputs[i];
      values[output] = std::move(stack[i]);
      ++live;
    }
    peak_live_values_ = std::max(peak_live_values_, live);
    for (ValueId released : lifetimes.release_after(id)) {
      values[released] = c10::IValue();
      --live;
    }
  }

  std::vector<c10::IValue> outputs;
  outputs.reserve(graph_.outputs().size());
  for (ValueId output : graph_.outputs()) outputs.push_back(values[output]);
  return outputs;
}

}  // namespace opara
