#include "action_runner.h"

#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <algorithm>

namespace opara {
namespace {

// Every tensor inside `value`: lists of tensors (cat's inputs) and tuples included.
template <typename Visit>
void for_each_tensor(const c10::IValue& value, const Visit& visit) {
  if (value.isTensor()) {
    visit(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorList()) visit(tensor);
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) for_each_tensor(element, visit);
  } else if (value.isTuple()) {
    for (const c10::IValue& element : value.toTupleRef().elements()) for_each_tensor(element, visit);
  }
}

}  // namespace

ActionRun run_actions(const Graph& graph, const std::vector<std::shared_ptr<const NodeOp>>& ops,
                      const std::vector<CaptureAction>& actions, const std::vector<c10::IValue>& inputs,
                      StreamBackend& backend, MemoryProtection memory) {
  TORCH_INTERNAL_ASSERT(inputs.size() == graph.inputs().size(), "opara bug: run_actions given the wrong inputs");
  c10::AutoGradMode no_grad(false);
  std::vector<c10::IValue> values(graph.values().size());
  std::vector<std::size_t> uses_left(graph.values().size(), 0);
  std::vector<bool> pinned(graph.values().size(), false);
  for (const Value& value : graph.values()) uses_left[value.id] = value.users.size();
  for (ValueId output : graph.outputs()) pinned[output] = true;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    values[graph.inputs()[i]] = inputs[i];
    pinned[graph.inputs()[i]] = true;
  }
  const bool keep_alive = memory == MemoryProtection::kKeepAlive;

  ActionRun run;
  int current = kOriginStream;
  backend.enter(kOriginStream);
  std::vector<c10::IValue> stack;
  for (const CaptureAction& action : actions) {
    switch (action.step) {
      case CaptureStep::kFork: backend.fork(action.stream); continue;
      case CaptureStep::kJoin: backend.join(action.stream); continue;
      case CaptureStep::kWait: backend.wait(action.stream, action.node); continue;
      case CaptureStep::kRecord: backend.record(action.stream, action.node); continue;
      case CaptureStep::kRun: break;
    }
    if (action.stream != current) {
      backend.enter(action.stream);
      current = action.stream;
    }
    const Node& node = graph.node(action.node);
    stack.clear();
    for (ValueId input : node.inputs) {
      stack.push_back(values[input]);
      if (!keep_alive) for_each_tensor(values[input], [&](const at::Tensor& t) { backend.read_on(t, current); });
    }
    run_node(graph, node.id, *ops[node.id], stack);
    for (std::size_t i = 0; i < node.outputs.size(); ++i) values[node.outputs[i]] = std::move(stack[i]);
    // Drop what this node read for the last time, and outputs nobody reads.
    auto release = [&](ValueId value) {
      if (pinned[value]) return;
      if (keep_alive) run.kept.push_back(values[value]);
      values[value] = c10::IValue();
    };
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const ValueId input = node.inputs[k];
      if (std::find(node.inputs.begin(), node.inputs.begin() + k, input) != node.inputs.begin() + k) continue;
      if (--uses_left[input] == 0) release(input);
    }
    for (ValueId output : node.outputs) {
      if (uses_left[output] == 0) release(output);
    }
  }
  if (current != kOriginStream) backend.enter(kOriginStream);
  run.outputs.reserve(graph.outputs().size());
  for (ValueId output : graph.outputs()) run.outputs.push_back(values[output]);
  return run;
}

}  // namespace opara
