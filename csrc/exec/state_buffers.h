#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>
#include <vector>

#include "exec/node_op.h"
#include "opara/graph.h"

namespace opara {

// A state buffer's first value (StateBuffer::initial): the tensor the model file saved.
class InitialValueOp final : public NodeOp {
 public:
  explicit InitialValueOp(at::Tensor value) : value_(std::move(value)) {}
  void run(std::vector<c10::IValue>& stack) const override {
    stack.clear();
    stack.emplace_back(value_);
  }
  [[nodiscard]] std::shared_ptr<const NodeOp> to(c10::Device device) const override {
    return std::make_shared<InitialValueOp>(move_tensors(value_, device).toTensor());
  }

 private:
  at::Tensor value_;
};

// Fresh copies of the graph's state buffers' first values on `device`, in Graph::state() order:
// the state one compiled model keeps (two models compiled from one file do not share it).
// Throws opara::Error naming a buffer without a first value.
std::vector<at::Tensor> initial_state(const Graph& graph, c10::Device device);

}  // namespace opara
