#include "schedule/kernel_dag.h"

namespace opara {

KernelDag kernel_dag(const Graph& graph) {
  const std::size_t count = graph.size();
  KernelDag dag;
  dag.launches_kernel.resize(count);
  dag.predecessors.resize(count);
  dag.successors.resize(count);
  // seen[k] == id: kernel node k is already among node id's predecessors.
  std::vector<NodeId> seen(count, kNoNode);
  for (const Node& node : graph.nodes()) {
    dag.launches_kernel[node.id] = node.has(kLaunchesKernel) ? 1 : 0;
    dag.kernel_count += dag.launches_kernel[node.id];
    auto& predecessors = dag.predecessors[node.id];
    auto add = [&](NodeId kernel) {
      if (seen[kernel] != node.id) {
        seen[kernel] = node.id;
        predecessors.push_back(kernel);
      }
    };
    for (NodeId predecessor : node.predecessors) {
      if (dag.launches_kernel[predecessor]) {
        add(predecessor);
      } else {
        for (NodeId kernel : dag.predecessors[predecessor]) add(kernel);
      }
    }
    if (dag.launches_kernel[node.id]) {
      for (NodeId predecessor : predecessors) dag.successors[predecessor].push_back(node.id);
    }
  }
  return dag;
}

std::vector<std::int32_t> positions_in(const std::vector<NodeId>& order, std::size_t node_count) {
  std::vector<std::int32_t> position(node_count, -1);
  for (std::size_t i = 0; i < order.size(); ++i) position[order[i]] = static_cast<std::int32_t>(i);
  return position;
}

}  // namespace opara
