#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <vector>

#include "opara/graph.h"

namespace opara {

// The reference executor: runs a Graph node by node on one device, in program order or in any
// topological order given, freeing each intermediate after its last use. On the CPU its outputs
// equal the model's own forward bit for bit; every other executor is checked against it.
class EagerExecutor {
 public:
  // Copies the graph and moves its constant tensors to `device` once.
  explicit EagerExecutor(const Graph& graph, c10::Device device = c10::kCPU);

  // Runs in program order. Inputs are moved to the executor's device; the graph's outputs are
  // returned in order. Throws opara::Error for a wrong input count, or naming the node that
  // failed.
  std::vector<c10::IValue> run(const std::vector<c10::IValue>& inputs);
  // Runs in `order`, which must be a topological order of the graph.
  std::vector<c10::IValue> run(const std::vector<c10::IValue>& inputs, const std::vector<NodeId>& order);

  // Called after each node with the node's inputs and outputs (shape recording, debugging).
  using Observer =
      std::function<void(NodeId, const std::vector<c10::IValue>& inputs, const std::vector<c10::IValue>& outputs)>;
  void set_observer(Observer observer) { observer_ = std::move(observer); }
  // Called just before each node runs (the profiler pushes the node's correlation id here and pops
  // it in the observer). When the node fails, the observer is not called.
  using BeforeNode = std::function<void(NodeId)>;
  void set_before_node(BeforeNode hook) { before_node_ = std::move(hook); }

  // The most intermediate values (node outputs) alive at once during the last run.
  [[nodiscard]] std::size_t peak_live_values() const { return peak_live_values_; }
  [[nodiscard]] const Graph& graph() const { return graph_; }

 private:
  Graph graph_;
  c10::Device device_;
  std::vector<std::shared_ptr<const NodeOp>> ops_;  // by NodeId, constants on device_
  std::vector<NodeId> program_order_;
  std::size_t peak_live_values_ = 0;
  Observer observer_;
  BeforeNode before_node_;
};

}  // namespace opara
