// Nimble's stream assignment, the baseline Opara compares against: take the transitive reduction
// of the DAG, match each node to at most one successor over its edges (maximum bipartite matching,
// Hopcroft-Karp), and run each matched chain on one stream. The chains are a minimum path cover
// of the reduced DAG, so the stream count is the smallest any path-per-stream assignment gets.
#include "../graph/bipartite_matching.h"
#include "../graph/dag_reduction.h"
#include "stages.h"

namespace opara {

StreamAssignment nimble_streams(const KernelDag& dag, const std::vector<NodeId>& order) {
  const std::size_t count = dag.launches_kernel.size();
  // Kernel nodes renumbered densely, keeping id order (topological).
  std::vector<int> dense(count, -1);
  std::vector<NodeId> node_of;
  node_of.reserve(dag.kernel_count);
  for (NodeId id = 0; id < static_cast<NodeId>(count); ++id) {
    if (dag.is_kernel(id)) {
      dense[id] = static_cast<int>(node_of.size());
      node_of.push_back(id);
    }
  }
  std::vector<std::vector<int>> successors(node_of.size());
  for (std::size_t k = 0; k < node_of.size(); ++k) {
    for (NodeId next : dag.successors[node_of[k]]) successors[k].push_back(dense[next]);
  }
  const std::vector<int> next_in_chain =
      maximum_bipartite_matching(reduce_transitively(successors), static_cast<int>(node_of.size()));

  StreamAssignment result;
  result.stream_of.assign(count, kNoStream);
  // A chain's head comes before the rest of it in any topological order: number chains as
  // their heads are met.
  for (NodeId node : order) {
    if (!dag.is_kernel(node) || result.stream_of[node] != kNoStream) continue;
    const int stream = result.stream_count++;
    for (int k = dense[node]; k >= 0; k = next_in_chain[k]) result.stream_of[node_of[k]] = stream;
  }
  return result;
}

}  // namespace opara
