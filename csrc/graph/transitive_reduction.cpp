// Transitive reduction of a DAG. For each node u, visit its successors in topological order:
// an edge u -> v is redundant exactly when v is reached through a successor visited before it
// (any such path passes through an earlier successor). Reachability is built on the fly in
// reverse topological order, one bitset per node.
//
//   a -> b -> c, a -> c     c is reached through b, so a -> c is dropped
#include <algorithm>
#include <unordered_map>

#include "opara/graph_analysis.h"

namespace opara {

std::vector<Edge> transitive_reduction(const Graph& graph) {
  const std::size_t words = (graph.size() + 63) / 64;
  std::vector<std::vector<std::uint64_t>> reach(graph.size(), std::vector<std::uint64_t>(words, 0));
  auto test = [](const std::vector<std::uint64_t>& row, NodeId id) {
    return (row[static_cast<std::size_t>(id) / 64] >> (static_cast<std::size_t>(id) % 64)) & 1u;
  };
  std::vector<Edge> kept;
  for (auto id = static_cast<NodeId>(graph.size()) - 1; id >= 0; --id) {
    auto& row = reach[id];
    for (NodeId next : graph.node(id).successors) {  // sorted by id: topological
      if (!test(row, next)) kept.push_back(Edge{id, next, EdgeKind::kData});
      row[static_cast<std::size_t>(next) / 64] |= std::uint64_t{1} << (static_cast<std::size_t>(next) % 64);
      for (std::size_t w = 0; w < words; ++w) row[w] |= reach[next][w];
    }
  }
  // Keep each kept edge's own kind, and list them in the graph's order.
  std::unordered_map<std::uint64_t, EdgeKind> kinds;
  auto key = [](NodeId from, NodeId to) {
    return (static_cast<std::uint64_t>(from) << 32) | static_cast<std::uint32_t>(to);
  };
  for (const Edge& edge : graph.edges()) kinds.emplace(key(edge.from, edge.to), edge.kind);
  for (Edge& edge : kept) edge.kind = kinds.at(key(edge.from, edge.to));
  std::sort(kept.begin(), kept.end(),
            [](const Edge& a, const Edge& b) { return a.from != b.from ? a.from < b.from : a.to < b.to; });
  return kept;
}

}  // namespace opara
