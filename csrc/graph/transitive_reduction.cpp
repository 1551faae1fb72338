// Transitive reduction of a DAG. For each vertex u, visit its successors in topological order:
// an edge u -> v is redundant exactly when v is reached through a successor visited before it
// (any such path passes through an earlier successor). Reachability is built on the fly in
// reverse topological order, one bitset per vertex.
//
//   a -> b -> c, a -> c     c is reached through b, so a -> c is dropped
#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "graph/dag_reduction.h"
#include "graph/graph_analysis.h"

namespace opara {

std::vector<std::vector<int>> reduce_transitively(const std::vector<std::vector<int>>& successors) {
  const std::size_t count = successors.size();
  const std::size_t words = (count + 63) / 64;
  std::vector<std::vector<std::uint64_t>> reach(count, std::vector<std::uint64_t>(words, 0));
  std::vector<std::vector<int>> kept(count);
  for (auto id = static_cast<int>(count) - 1; id >= 0; --id) {
    auto& row = reach[id];
    for (int next : successors[id]) {  // sorted: topological
      const auto word = static_cast<std::size_t>(next) / 64;
      const auto bit = std::uint64_t{1} << (static_cast<std::size_t>(next) % 64);
      if (!(row[word] & bit)) kept[id].push_back(next);
      row[word] |= bit;
      for (std::size_t w = 0; w < words; ++w) row[w] |= reach[next][w];
    }
  }
  return kept;
}

std::vector<std::vector<std::uint64_t>> reachable_sets(const std::vector<std::vector<int>>& successors) {
  const std::size_t count = successors.size();
  const std::size_t words = (count + 63) / 64;
  std::vector<std::vector<std::uint64_t>> reach(count, std::vector<std::uint64_t>(words, 0));
  for (auto id = static_cast<int>(count) - 1; id >= 0; --id) {
    auto& row = reach[id];
    for (int next : successors[id]) {
      row[static_cast<std::size_t>(next) / 64] |= std::uint64_t{1} << (static_cast<std::size_t>(next) % 64);
      for (std::size_t w = 0; w < words; ++w) row[w] |= reach[next][w];
    }
  }
  return reach;
}

std::vector<Edge> transitive_reduction(const Graph& graph) {
  std::vector<std::vector<int>> successors(graph.size());
  for (const Node& node : graph.nodes()) successors[node.id].assign(node.successors.begin(), node.successors.end());
  const auto reduced = reduce_transitively(successors);
  // Keep each kept edge's own kind, and list them in the graph's order.
  std::unordered_map<std::uint64_t, EdgeKind> kinds;
  auto key = [](NodeId from, NodeId to) {
    return (static_cast<std::uint64_t>(from) << 32) | static_cast<std::uint32_t>(to);
  };
  for (const Edge& edge : graph.edges()) kinds.emplace(key(edge.from, edge.to), edge.kind);
  std::vector<Edge> kept;
  for (NodeId from = 0; from < static_cast<NodeId>(reduced.size()); ++from) {
    for (int to : reduced[from]) kept.push_back(Edge{from, to, kinds.at(key(from, to))});
  }
  return kept;
}

}  // namespace opara
