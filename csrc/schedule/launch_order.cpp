// Launch orders. Opara's (Alg. 2): keep the ready nodes in two lists, memory-bound and
// compute-bound; take from the lists in turn (from the other one when one is empty), each time the
// node with the smallest resource demand, so that small operators fill the GPU around large ones
// and memory-bound work overlaps compute-bound work. Nodes that launch no kernel are taken as soon
// as they are ready: they cost nothing and may free kernels behind them.
#include <fmt/format.h>

#include <functional>
#include <queue>

#include "graph/graph_analysis.h"
#include "opara/error.h"
#include "schedule/stages.h"
#include "support/internal_assert.h"

namespace opara {
namespace {

struct Ready {
  double demand;
  NodeId node;
  // std::priority_queue keeps the largest on top: invert for the smallest demand, then program order.
  bool operator<(const Ready& other) const {
    return demand != other.demand ? demand > other.demand : node > other.node;
  }
};

std::vector<NodeId> opara_order(const Graph& graph, const std::vector<NodeCost>& costs) {
  const std::size_t count = graph.size();
  std::vector<std::size_t> waiting(count);
  std::priority_queue<Ready> memory_bound;
  std::priority_queue<Ready> compute_bound;
  std::vector<NodeId> free_nodes;  // kernel-free ready nodes, taken at once
  auto make_ready = [&](NodeId id) {
    const Node& node = graph.node(id);
    if (!node.has(kLaunchesKernel)) {
      free_nodes.push_back(id);
    } else if (costs.empty()) {
      memory_bound.push(Ready{0, id});
    } else {
      (costs[id].op_class == OpClass::kCompute ? compute_bound : memory_bound).push(Ready{costs[id].demand, id});
    }
  };
  for (const Node& node : graph.nodes()) {
    waiting[node.id] = node.predecessors.size();
    if (waiting[node.id] == 0) make_ready(node.id);
  }
  std::vector<NodeId> order;
  order.reserve(count);
  auto launch = [&](NodeId id) {
    order.push_back(id);
    for (NodeId next : graph.node(id).successors) {
      if (--waiting[next] == 0) make_ready(next);
    }
  };
  bool memory_turn = true;
  while (true) {
    while (!free_nodes.empty()) {
      const NodeId id = free_nodes.back();
      free_nodes.pop_back();
      launch(id);
    }
    if (memory_bound.empty() && compute_bound.empty()) break;
    auto& list = (memory_turn ? memory_bound : compute_bound).empty() ? (memory_turn ? compute_bound : memory_bound)
                                                                      : (memory_turn ? memory_bound : compute_bound);
    const NodeId id = list.top().node;
    list.pop();
    memory_turn = &list != &memory_bound;
    launch(id);
  }
  return order;
}

}  // namespace

std::vector<NodeId> launch_order(const Graph& graph, OrderPolicy policy, const std::vector<NodeCost>& costs) {
  if (!costs.empty() && costs.size() != graph.size()) {
    throw Error(
        fmt::format("{}: {} node costs given for a graph of {} nodes", graph.source_path, costs.size(), graph.size()));
  }
  switch (policy) {
    case OrderPolicy::kTopological: return topological_order(graph);
    case OrderPolicy::kOpara: return opara_order(graph, costs);
    case OrderPolicy::kTrtllm: return trtllm_order(graph);
  }
  OPARA_UNREACHABLE("unknown order policy {}", static_cast<int>(policy));
}

}  // namespace opara
