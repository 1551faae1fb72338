#include "runtime/cpu/no_stream_nodes.h"

#include <algorithm>

namespace opara {

NoStreamNodes::NoStreamNodes(const Graph& graph, const Plan& plan)
    : ancestors_(graph.size()), flags_(std::make_unique<Flag[]>(graph.size())), node_count_(graph.size()) {
  for (const Node& node : graph.nodes()) {  // ids are topological: predecessors are done first
    auto& ancestors = ancestors_[node.id];
    for (NodeId predecessor : node.predecessors) {
      if (plan.stream_of[predecessor] != kNoStream) continue;
      ancestors.push_back(predecessor);
      const auto& further = ancestors_[predecessor];
      ancestors.insert(ancestors.end(), further.begin(), further.end());
    }
    std::sort(ancestors.begin(), ancestors.end());
    ancestors.erase(std::unique(ancestors.begin(), ancestors.end()), ancestors.end());
  }
}

void NoStreamNodes::start_run() {
  for (std::size_t id = 0; id < node_count_; ++id) flags_[id].done.store(false, std::memory_order_relaxed);
}

}  // namespace opara
