#pragma once

#include <cstdint>
#include <vector>

#include "opara/graph.h"

namespace opara {

// The dependencies that matter on a device: between nodes that launch kernels. A node that
// launches none (a view, a shape query, a list) passes its inputs' producers on to its users, so
// u -> view -> v becomes u -> v. Every stream and event decision is made on this DAG.
struct KernelDag {
  std::vector<std::uint8_t> launches_kernel;  // by node id
  // By node id: the kernel nodes it depends on directly or through kernel-free nodes, in the
  // order of its predecessors, each once. Filled for kernel-free nodes too.
  std::vector<std::vector<NodeId>> predecessors;
  // By node id, kernel nodes only: the kernel nodes depending on it, sorted by id (program
  // order), so successors.front() is its first successor.
  std::vector<std::vector<NodeId>> successors;
  std::size_t kernel_count = 0;

  [[nodiscard]] bool is_kernel(NodeId id) const { return launches_kernel[id] != 0; }
};

KernelDag kernel_dag(const Graph& graph);

// Position of each node in `order`.
std::vector<std::int32_t> positions_in(const std::vector<NodeId>& order, std::size_t node_count);

}  // namespace opara
