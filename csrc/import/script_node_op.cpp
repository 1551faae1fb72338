#include "import/script_node_op.h"

#include <ATen/ATen.h>

namespace opara {

ScriptNodeOp::ScriptNodeOp(std::shared_ptr<torch::jit::Graph> owner, torch::jit::Operation operation,
                           std::vector<std::optional<c10::IValue>> arguments)
    : owner_(std::move(owner)), operation_(std::move(operation)), arguments_(std::move(arguments)) {}

std::vector<c10::IValue> ScriptNodeOp::call_arguments(const std::vector<c10::IValue>& inputs) const {
  std::vector<c10::IValue> full;
  full.reserve(arguments_.size());
  std::size_t next = 0;
  for (const auto& argument : arguments_) full.push_back(argument ? *argument : inputs.at(next++));
  return full;
}

void ScriptNodeOp::run(std::vector<c10::IValue>& stack) const {
  std::vector<c10::IValue> full = call_arguments(stack);
  stack.clear();  // drop the extra references before running, as the interpreter would
  operation_(full);
  stack = std::move(full);
}

std::shared_ptr<const NodeOp> ScriptNodeOp::to(c10::Device device) const {
  std::vector<std::optional<c10::IValue>> moved;
  moved.reserve(arguments_.size());
  for (const auto& argument : arguments_) {
    moved.push_back(argument ? std::optional<c10::IValue>(move_tensors(*argument, device)) : std::nullopt);
  }
  return std::make_shared<ScriptNodeOp>(owner_, operation_, std::move(moved));
}

}  // namespace opara
