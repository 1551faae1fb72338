// Longest paths in a DAG: one pass in topological order (node ids are one) keeping, per node, the
// heaviest path that ends there and the predecessor it came through; and one pass back for the
// heaviest path that starts there.
#include <algorithm>

#include "graph/graph_analysis.h"
#include "support/internal_assert.h"

namespace opara {

CriticalPath critical_path(const Graph& graph, const std::vector<double>& weights) {
  OPARA_ASSERT(weights.empty() || weights.size() == graph.size(),
               "critical_path: {} weights given for a graph of {} nodes", weights.size(), graph.size());
  CriticalPath result;
  if (graph.size() == 0) return result;
  std::vector<double> ends_at(graph.size(), 0);
  std::vector<NodeId> came_from(graph.size(), kNoNode);
  for (const Node& node : graph.nodes()) {
    double best = 0;
    for (NodeId pred : node.predecessors) {
      if (came_from[node.id] == kNoNode || ends_at[pred] > best) {
        best = ends_at[pred];
        came_from[node.id] = pred;
      }
    }
    ends_at[node.id] = best + (weights.empty() ? 1.0 : weights[node.id]);
  }
  auto last = static_cast<NodeId>(std::max_element(ends_at.begin(), ends_at.end()) - ends_at.begin());
  result.length = ends_at[last];
  for (NodeId at = last; at != kNoNode; at = came_from[at]) result.nodes.push_back(at);
  std::reverse(result.nodes.begin(), result.nodes.end());
  return result;
}

std::vector<double> remaining_path_lengths(const Graph& graph, const std::vector<double>& weights) {
  OPARA_ASSERT(weights.size() == graph.size(), "remaining_path_lengths: {} weights given for a graph of {} nodes",
               weights.size(), graph.size());
  std::vector<double> remaining(graph.size(), 0);
  for (auto id = static_cast<NodeId>(graph.size()) - 1; id >= 0; --id) {  // ids are topological
    double after = 0;
    for (NodeId next : graph.node(id).successors) after = std::max(after, remaining[next]);
    remaining[id] = weights[id] + after;
  }
  return remaining;
}

}  // namespace opara
