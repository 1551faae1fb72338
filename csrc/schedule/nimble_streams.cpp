// Nimble's stream assignment, the baseline Opara compares against, as Nimble's own code does it
// (torch/csrc/jit/passes/autostream.cpp, map_streams), in two steps:
//  1. chains: match each node to at most one successor over the edges of the transitive reduction
//     (maximum bipartite matching); the matched runs are a minimum path cover of the reduced DAG.
//  2. streams: chain i may precede chain j when i's last node reaches j's first. That relation is
//     transitive already (j's first node reaches its last), so it is its own closure; a second
//     matching over it gives a minimum path cover of the chains, and each path of chains is one
//     stream. A branch's chain can then run on into a later module's branch: GoogLeNet's 28 chains
//     become 4 streams, the count the Opara paper reports for Nimble.
// Nimble matches by Kuhn's augmenting paths, we by Hopcroft-Karp: both find a maximum matching, so
// the counts agree; which of several equally small covers comes out may differ.
#include <cstdint>

#include "graph/bipartite_matching.h"
#include "graph/dag_reduction.h"
#include "schedule/stages.h"

namespace opara {
namespace {

// The kernel nodes renumbered densely in id order (a topological order), with their successor lists.
struct DenseKernelDag {
  std::vector<int> dense;       // by node id; -1 for kernel-free nodes
  std::vector<NodeId> node_of;  // by dense index
  std::vector<std::vector<int>> successors;
};

DenseKernelDag dense_kernel_dag(const KernelDag& dag) {
  DenseKernelDag result;
  const std::size_t count = dag.launches_kernel.size();
  result.dense.assign(count, -1);
  result.node_of.reserve(dag.kernel_count);
  for (NodeId id = 0; id < static_cast<NodeId>(count); ++id) {
    if (dag.is_kernel(id)) {
      result.dense[id] = static_cast<int>(result.node_of.size());
      result.node_of.push_back(id);
    }
  }
  result.successors.resize(result.node_of.size());
  for (std::size_t k = 0; k < result.node_of.size(); ++k) {
    for (NodeId next : dag.successors[result.node_of[k]]) result.successors[k].push_back(result.dense[next]);
  }
  return result;
}

// Groups linked by `next_of` (each group's members reached from its first one) numbered as their
// first members are met in `order`: for chains, the head of a chain precedes the rest of it in any
// topological order, and the first chain of a path of chains precedes the others.
StreamAssignment number_groups(const KernelDag& dag, const std::vector<NodeId>& order, const std::vector<int>& group_of,
                               const std::vector<int>& next_of, const std::vector<std::vector<NodeId>>& members) {
  StreamAssignment result;
  result.stream_of.assign(dag.launches_kernel.size(), kNoStream);
  std::vector<bool> numbered(members.size(), false);
  for (NodeId node : order) {
    if (!dag.is_kernel(node) || numbered[group_of[node]]) continue;
    const int stream = result.stream_count++;
    for (int group = group_of[node]; group >= 0; group = next_of[group]) {
      numbered[group] = true;
      for (NodeId member : members[group]) result.stream_of[member] = stream;
    }
  }
  return result;
}

}  // namespace

StreamAssignment nimble_chains(const KernelDag& dag, const std::vector<NodeId>& order) {
  const DenseKernelDag kernels = dense_kernel_dag(dag);
  const std::vector<int> next_in_chain =
      maximum_bipartite_matching(reduce_transitively(kernels.successors), static_cast<int>(kernels.node_of.size()));
  // Each node a group of its own, linked to the next node of its chain.
  std::vector<int> group_of(dag.launches_kernel.size(), -1);
  std::vector<std::vector<NodeId>> members(kernels.node_of.size());
  for (std::size_t k = 0; k < kernels.node_of.size(); ++k) {
    group_of[kernels.node_of[k]] = static_cast<int>(k);
    members[k] = {kernels.node_of[k]};
  }
  return number_groups(dag, order, group_of, next_in_chain, members);
}

StreamAssignment nimble_streams(const KernelDag& dag, const std::vector<NodeId>& order) {
  const StreamAssignment chains = nimble_chains(dag, order);
  const DenseKernelDag kernels = dense_kernel_dag(dag);
  const std::vector<std::vector<std::uint64_t>> reach = reachable_sets(kernels.successors);
  // Each chain's nodes in `order`: the first is its head, the last its tail.
  std::vector<std::vector<NodeId>> members(static_cast<std::size_t>(chains.stream_count));
  for (NodeId node : order) {
    if (dag.is_kernel(node)) members[chains.stream_of[node]].push_back(node);
  }
  std::vector<std::vector<int>> may_precede(members.size());
  for (std::size_t i = 0; i < members.size(); ++i) {
    const int tail = kernels.dense[members[i].back()];
    for (std::size_t j = 0; j < members.size(); ++j) {
      if (reaches(reach, tail, kernels.dense[members[j].front()])) may_precede[i].push_back(static_cast<int>(j));
    }
  }
  const std::vector<int> next_chain = maximum_bipartite_matching(may_precede, chains.stream_count);
  return number_groups(dag, order, chains.stream_of, next_chain, members);
}

}  // namespace opara
