#include "runtime/cuda/action_runner.h"

#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "exec/outputs.h"
#include "exec/value_lifetimes.h"
#include "support/internal_assert.h"

namespace opara {
ActionRun run_actions(const Graph& graph, const std::vector<std::shared_ptr<const NodeOp>>& ops,
                      const std::vector<CaptureAction>& actions, const std::vector<c10::IValue>& inputs,
                      StreamBackend& backend, MemoryProtection memory) {
  OPARA_ASSERT(inputs.size() == graph.inputs().size(), "run_actions given {} inputs for a graph of {}", inputs.size(),
               graph.inputs().size());
  c10::AutoGradMode no_grad(false);
  std::vector<c10::IValue> values(graph.values().size());
  ValueLifetimes lifetimes(graph);
  for (std::size_t i = 0; i < inputs.size(); ++i) values[graph.inputs()[i]] = inputs[i];
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
    for (ValueId input : node.inputs) stack.push_back(values[input]);
    if (!keep_alive) {
      for (const at::Tensor& tensor : flatten_tensors(stack)) backend.read_on(tensor, current);
    }
    run_node(graph, node.id, *ops[node.id], stack);
    backend.ran(current, node.id);
    for (std::size_t i = 0; i < node.outputs.size(); ++i) values[node.outputs[i]] = std::move(stack[i]);
    for (ValueId released : lifetimes.release_after(node.id)) {
      if (keep_alive) run.kept.push_back(std::move(values[released]));
      values[released] = c10::IValue();
    }
  }
  if (current != kOriginStream) backend.enter(kOriginStream);
  run.outputs.reserve(graph.outputs().size());
  for (ValueId output : graph.outputs()) run.outputs.push_back(values[output]);
  return run;
}

}  // namespace opara
