#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <vector>

#include "exec/node_op.h"

namespace opara {

// One schema argument of a dispatcher call: a constant, or built from the node's runtime inputs.
struct ArgumentSlot {
  enum class Kind { kConstant, kValue, kTensorList, kOptionalTensorList, kIntList };
  // In a list: the element is None (optional lists only), or the constant at the same index of
  // `list_constants` (a parameter, such as the weights aten::lstm takes as one list).
  static constexpr int kNone = -1;
  static constexpr int kListConstant = -2;

  Kind kind = Kind::kConstant;
  c10::IValue constant;
  // Positions in the node's runtime inputs, or kNone / kListConstant for a list element. A
  // kIntList (sizes, some computed in the graph) takes its kListConstant elements from `constant`,
  // an int list as long as `positions`.
  std::vector<int> positions;
  // Lists only: as long as `positions` when any element is a constant, else empty.
  std::vector<at::Tensor> list_constants;
  // kValue: a number computed in the graph (a Python float under torch.compile: aten::item's
  // result) where the schema wants a Tensor: wrapped at run time as a wrapped-number tensor, as
  // Python's argument parser does.
  bool wrap_number = false;
};

// `number` as a tensor that type promotion ranks below every real tensor (a Python scalar's rank).
at::Tensor wrapped_number(const c10::Scalar& number);

// How a schema result becomes node outputs.
enum class ResultUse { kValue, kUnpackList, kDrop };

// An exported-program node as a NodeOp: a boxed call through the dispatcher.
class DispatcherNodeOp final : public NodeOp {
 public:
  DispatcherNodeOp(c10::OperatorHandle op, std::vector<ArgumentSlot> arguments, std::vector<ResultUse> results);

  void run(std::vector<c10::IValue>& stack) const override;
  [[nodiscard]] std::vector<c10::IValue> call_arguments(const std::vector<c10::IValue>& inputs) const override;
  [[nodiscard]] std::shared_ptr<const NodeOp> to(c10::Device device) const override;

 private:
  c10::OperatorHandle op_;
  std::vector<ArgumentSlot> arguments_;
  std::vector<ResultUse> results_;
};

}  // namespace opara
