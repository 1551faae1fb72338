#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "opara/graph.h"

namespace opara {

// Counts each value's readers so that a single-threaded executor can drop a value after its last
// one, whatever order the nodes run in. Graph inputs and outputs are never dropped.
class ValueLifetimes {
 public:
  explicit ValueLifetimes(const Graph& graph)
      : graph_(graph), uses_left_(graph.values().size(), 0), pinned_(graph.values().size(), false) {
    for (const Value& value : graph.values()) uses_left_[value.id] = value.users.size();
    for (ValueId input : graph.inputs()) pinned_[input] = true;
    for (ValueId output : graph.outputs()) pinned_[output] = true;
  }

  // After `node` ran: the values it read for the last time and its outputs nobody reads.
  std::vector<ValueId> release_after(NodeId id) {
    const Node& node = graph_.node(id);
    std::vector<ValueId> released;
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const ValueId input = node.inputs[k];
      // Value::users lists a node once even when it reads the value twice.
      if (std::find(node.inputs.begin(), node.inputs.begin() + k, input) != node.inputs.begin() + k) continue;
      if (--uses_left_[input] == 0 && !pinned_[input]) released.push_back(input);
    }
    for (ValueId output : node.outputs) {
      if (uses_left_[output] == 0 && !pinned_[output]) released.push_back(output);
    }
    return released;
  }

 private:
  const Graph& graph_;
  std::vector<std::size_t> uses_left_;
  std::vector<bool> pinned_;
};

}  // namespace opara
