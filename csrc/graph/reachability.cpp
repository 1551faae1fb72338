#include "graph/reachability.h"

namespace opara {

Reachability::Reachability(const Graph& graph) {
  const std::size_t words = (graph.size() + 63) / 64;
  rows_.assign(graph.size(), std::vector<std::uint64_t>(words, 0));
  // Node ids are a topological order (Graph's invariant): walk them backwards so each successor's
  // row is complete before it is merged.
  for (auto id = static_cast<NodeId>(graph.size()) - 1; id >= 0; --id) {
    auto& row = rows_[id];
    for (NodeId next : graph.node(id).successors) {
      row[static_cast<std::size_t>(next) / 64] |= std::uint64_t{1} << (static_cast<std::size_t>(next) % 64);
      const auto& reached = rows_[next];
      for (std::size_t w = 0; w < words; ++w) row[w] |= reached[w];
    }
  }
}

}  // namespace opara
