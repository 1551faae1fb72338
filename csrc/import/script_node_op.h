#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <memory>
#include <optional>
#include <vector>

#include "exec/node_op.h"

namespace opara {

// A TorchScript node as a NodeOp: the JIT Operation, with each argument either taken from the
// runtime stack or a constant folded in at import.
class ScriptNodeOp final : public NodeOp {
 public:
  ScriptNodeOp(std::shared_ptr<torch::jit::Graph> owner, torch::jit::Operation operation,
               std::vector<std::optional<c10::IValue>> arguments);

  void run(std::vector<c10::IValue>& stack) const override;
  [[nodiscard]] std::vector<c10::IValue> call_arguments(const std::vector<c10::IValue>& inputs) const override;
  [[nodiscard]] std::shared_ptr<const NodeOp> to(c10::Device device) const override;

 private:
  std::shared_ptr<torch::jit::Graph> owner_;           // some Operations refer to their node's types
  mutable torch::jit::Operation operation_;            // its call operator is not const; it holds no run state
  std::vector<std::optional<c10::IValue>> arguments_;  // nullopt: next runtime input
};

}  // namespace opara
