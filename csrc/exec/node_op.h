#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <vector>

#include "opara/graph.h"

namespace opara {

// How one node of a Graph executes. The importers create one per node, with the node's constant
// arguments folded in, so that executors only pass values of the graph.
class NodeOp {
 public:
  virtual ~NodeOp() = default;

  // On entry `stack` holds the node's runtime inputs (Node::inputs, in order); on return, its
  // outputs (Node::outputs, in order).
  virtual void run(std::vector<c10::IValue>& stack) const = 0;

  // The operator's full argument list for these runtime inputs, constants folded back in, in
  // schema order: what cost estimates read weights and shapes from.
  [[nodiscard]] virtual std::vector<c10::IValue> call_arguments(const std::vector<c10::IValue>& inputs) const {
    return inputs;
  }

  // The same operation with its constant tensors on `device`.
  [[nodiscard]] virtual std::shared_ptr<const NodeOp> to(c10::Device device) const = 0;
};

// Runs `op` as node `id` of `graph`: on entry `stack` holds the node's inputs, on return its
// outputs. A failure becomes opara::Error naming the file (or "graph", for a graph built in memory)
// and the node.
void run_node(const Graph& graph, NodeId id, const NodeOp& op, std::vector<c10::IValue>& stack);

// `value` with `leaf` applied to everything in it that is not a list or a tuple (each tensor of a
// tensor list too), lists and tuples rebuilt around the results.
c10::IValue map_leaves(const c10::IValue& value, const std::function<c10::IValue(const c10::IValue&)>& leaf);

// Moves every tensor inside `value` (lists and tuples included) to `device`, and turns every
// device constant (cpu, cuda:0, cuda:1) into `device`; wrapped numbers stay CPU scalars.
c10::IValue move_tensors(const c10::IValue& value, c10::Device device);

// The graph's operations with their constants on `device` (NodeOp::to), by NodeId: what an
// executor on `device` runs. A graph exported from CUDA tensors names cuda:0 in its factory calls
// and checks, one exported on the CPU names cpu: either way they must say where the graph runs.
// Throws opara::Error naming a node without an operation.
std::vector<std::shared_ptr<const NodeOp>> ops_on_device(const Graph& graph, c10::Device device);

// Where a model input lives on a model running on `device`: there, except a 0-dim CPU tensor on
// a CUDA model, which stays a CPU scalar as eager PyTorch takes it (a Python float Dynamo made a
// tensor): CUDA kernels read it as an argument, and an op that reads its value (item) needs no
// device synchronisation.
at::Tensor place_input(const at::Tensor& tensor, c10::Device device, bool copy = false);

// Whether any tensor inside `value` (lists and tuples included) is on a CUDA device.
bool holds_cuda_tensors(const c10::IValue& value);

}  // namespace opara
