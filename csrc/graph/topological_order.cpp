// Topological orders of a Graph: the program order, random orders for testing, and a checker.
#include <algorithm>
#include <queue>
#include <random>

#include "opara/graph_analysis.h"

namespace opara {
namespace {

std::vector<int> in_degrees(const Graph& graph) {
  std::vector<int> degree(graph.size(), 0);
  for (const Node& node : graph.nodes()) degree[node.id] = static_cast<int>(node.predecessors.size());
  return degree;
}

}  // namespace

std::vector<NodeId> topological_order(const Graph& graph) {
  std::vector<int> degree = in_degrees(graph);
  std::priority_queue<NodeId, std::vector<NodeId>, std::greater<>> ready;
  for (const Node& node : graph.nodes()) {
    if (degree[node.id] == 0) ready.push(node.id);
  }
  std::vector<NodeId> order;
  order.reserve(graph.size());
  while (!ready.empty()) {
    const NodeId id = ready.top();
    ready.pop();
    order.push_back(id);
    for (NodeId next : graph.node(id).successors) {
      if (--degree[next] == 0) ready.push(next);
    }
  }
  return order;
}

std::vector<NodeId> random_topological_order(const Graph& graph, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<int> degree = in_degrees(graph);
  std::vector<NodeId> ready;
  for (const Node& node : graph.nodes()) {
    if (degree[node.id] == 0) ready.push_back(node.id);
  }
  std::vector<NodeId> order;
  order.reserve(graph.size());
  while (!ready.empty()) {
    std::uniform_int_distribution<std::size_t> pick(0, ready.size() - 1);
    std::swap(ready[pick(random)], ready.back());
    const NodeId id = ready.back();
    ready.pop_back();
    order.push_back(id);
    for (NodeId next : graph.node(id).successors) {
      if (--degree[next] == 0) ready.push_back(next);
    }
  }
  return order;
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
