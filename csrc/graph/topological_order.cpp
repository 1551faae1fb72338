// Topological orders of a Graph: the program order, random orders for testing, and a checker.
#include <algorithm>
#include <random>

#include "graph/graph_analysis.h"

namespace opara {
namespace {

// Kahn's algorithm; `pick` chooses which ready node goes next and returns its index in `ready`.
template <typename Pick>
std::vector<NodeId> kahn(const Graph& graph, Pick pick) {
  std::vector<std::size_t> degree(graph.size(), 0);
  std::vector<NodeId> ready;
  for (const Node& node : graph.nodes()) {
    degree[node.id] = node.predecessors.size();
    if (degree[node.id] == 0) ready.push_back(node.id);
  }
  std::vector<NodeId> order;
  order.reserve(graph.size());
  while (!ready.empty()) {
    std::swap(ready[pick(ready)], ready.back());
    const NodeId id = ready.back();
    ready.pop_back();
    order.push_back(id);
    for (NodeId next : graph.node(id).successors) {
      if (--degree[next] == 0) ready.push_back(next);
    }
  }
  return order;
}

}  // namespace

std::vector<NodeId> topological_order(const Graph& graph) {
  return kahn(graph, [](const std::vector<NodeId>& ready) {
    return static_cast<std::size_t>(std::min_element(ready.begin(), ready.end()) - ready.begin());
  });
}

std::vector<NodeId> random_topological_order(const Graph& graph, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  return kahn(graph, [&random](const std::vector<NodeId>& ready) {
    return std::uniform_int_distribution<std::size_t>(0, ready.size() - 1)(random);
  });
}

bool is_topological_order(const Graph& graph, const std::vector<NodeId>& order) {
  if (order.size() != graph.size()) return false;
  std::vector<std::ptrdiff_t> position(graph.size(), -1);
  for (std::size_t i = 0; i < order.size(); ++i) {
    const NodeId id = order[i];
    if (id < 0 || id >= static_cast<NodeId>(graph.size()) || position[id] != -1) return false;
    position[id] = static_cast<std::ptrdiff_t>(i);
  }
  return std::all_of(graph.edges().begin(), graph.edges().end(),
                     [&](const Edge& edge) { return position[edge.from] < position[edge.to]; });
}

}  // namespace opara
