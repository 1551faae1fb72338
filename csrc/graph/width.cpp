// Width of a DAG by Dilworth's theorem: the largest antichain equals the smallest number of
// chains covering the nodes (paths may share nodes, so chains follow reachability, not edges),
// which is n minus a maximum matching in the bipartite graph {u -> v : u reaches v}.
//
//   a -> b -> d        reachability: a->b, a->c, a->d, b->d, c->d
//   a -> c -> d        matching {a-b, b-d} covers with chains {a,b,d} and {c}: width 2 ({b, c})
#include "graph/bipartite_matching.h"
#include "graph/graph_analysis.h"
#include "graph/reachability.h"

namespace opara {

std::size_t width(const Graph& graph) {
  const Reachability reach(graph);
  const auto n = static_cast<NodeId>(graph.size());
  std::vector<std::vector<int>> adjacency(graph.size());
  for (NodeId from = 0; from < n; ++from) {
    for (NodeId to = from + 1; to < n; ++to) {
      if (reach.reaches(from, to)) adjacency[from].push_back(to);
    }
  }
  std::size_t matched = 0;
  for (int right : maximum_bipartite_matching(adjacency, static_cast<int>(n))) matched += right != -1;
  return graph.size() - matched;
}

}  // namespace opara
