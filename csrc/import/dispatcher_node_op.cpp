#include "import/dispatcher_node_op.h"

#include <ATen/ATen.h>

namespace opara {

namespace {

// One element of a tensor list argument: a runtime input, None (kNone) or a constant.
std::optional<at::Tensor> list_element(const ArgumentSlot& slot, std::size_t index,
                                       const std::vector<c10::IValue>& stack) {
  const int position = slot.positions[index];
  if (position == ArgumentSlot::kNone) return std::nullopt;
  if (position == ArgumentSlot::kListConstant) return slot.list_constants[index];
  return stack[position].toTensor();
}

}  // namespace

at::Tensor wrapped_number(const c10::Scalar& number) {
  at::Tensor wrapped = at::scalar_to_tensor(number);
  wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
  return wrapped;
}

DispatcherNodeOp::DispatcherNodeOp(c10::OperatorHandle op, std::vector<ArgumentSlot> arguments,
                                   std::vector<ResultUse> results)
    : op_(std::move(op)), arguments_(std::move(arguments)), results_(std::move(results)) {}

std::vector<c10::IValue> DispatcherNodeOp::call_arguments(const std::vector<c10::IValue>& stack) const {
  std::vector<c10::IValue> call;
  call.reserve(arguments_.size());
  for (const ArgumentSlot& slot : arguments_) {
    switch (slot.kind) {
      case ArgumentSlot::Kind::kConstant: call.push_back(slot.constant); break;
      case ArgumentSlot::Kind::kValue: {
        const c10::IValue& value = stack[slot.positions[0]];
        call.push_back(slot.wrap_number && value.isScalar() ? wrapped_number(value.toScalar()) : value);
        break;
      }
      case ArgumentSlot::Kind::kTensorList: {
        c10::List<at::Tensor> list;
        list.reserve(slot.positions.size());
        for (std::size_t k = 0; k < slot.positions.size(); ++k) list.push_back(*list_element(slot, k, stack));
        call.emplace_back(std::move(list));
        break;
      }
      case ArgumentSlot::Kind::kIntList: {
        std::vector<int64_t> ints = slot.constant.toIntVector();
        for (std::size_t k = 0; k < ints.size(); ++k) {
          if (slot.positions[k] != ArgumentSlot::kListConstant) ints[k] = stack[slot.positions[k]].toInt();
        }
        call.emplace_back(std::move(ints));
        break;
      }
      case ArgumentSlot::Kind::kOptionalTensorList: {
        c10::List<std::optional<at::Tensor>> list;
        for (std::size_t k = 0; k < slot.positions.size(); ++k) list.push_back(list_element(slot, k, stack));
        call.emplace_back(std::move(list));
        break;
      }
    }
  }
  return call;
}

void DispatcherNodeOp::run(std::vector<c10::IValue>& stack) const {
  std::vector<c10::IValue> call = call_arguments(stack);
  op_.callBoxed(call);
  stack.clear();
  for (std::size_t i = 0; i < results_.size(); ++i) {
    if (results_[i] == ResultUse::kValue) {
      stack.push_back(std::move(call[i]));
    } else if (results_[i] == ResultUse::kUnpackList) {
      for (const c10::IValue& element : call[i].toListRef()) stack.push_back(element);
    }
  }
}

std::shared_ptr<const NodeOp> DispatcherNodeOp::to(c10::Device device) const {
  auto arguments = arguments_;
  for (ArgumentSlot& slot : arguments) {
    if (slot.kind == ArgumentSlot::Kind::kConstant) slot.constant = move_tensors(slot.constant, device);
    for (at::Tensor& element : slot.list_constants) {
      if (element.defined()) element = element.to(device);
    }
  }
  return std::make_shared<DispatcherNodeOp>(op_, std::move(arguments), results_);
}

}  // namespace opara
