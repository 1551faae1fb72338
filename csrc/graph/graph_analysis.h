#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "opara/graph.h"

namespace opara {

// By value id: true when the model returns it.
std::vector<bool> model_output_mask(const Graph& graph);

// Kahn's algorithm, smallest node id first among the ready ones: for an imported graph this is
// the program order. Every graph is acyclic by construction, so this never fails.
std::vector<NodeId> topological_order(const Graph& graph);

// A topological order chosen uniformly among the ready nodes at each step, from `seed`. Running a
// graph in many such orders is how the tests prove its edges complete.
std::vector<NodeId> random_topological_order(const Graph& graph, std::uint64_t seed);

// True when `order` holds every node once and each edge goes forward in it.
bool is_topological_order(const Graph& graph, const std::vector<NodeId>& order);

// The width: the largest set of nodes no two of which are ordered by a path (Dilworth: the node
// count minus a maximum matching in the reachability bipartite graph). An upper bound on how many
// operators could ever run at the same time.
std::size_t width(const Graph& graph);

struct CriticalPath {
  double length = 0;          // sum of the weights on the path (node count when unweighted)
  std::vector<NodeId> nodes;  // the path itself, first to last
};

// The longest path through the DAG. Without weights every node counts 1; with them, `weights`
// has one entry per node (a duration, say).
CriticalPath critical_path(const Graph& graph, const std::vector<double>& weights = {});

// Per node, its weight plus the heaviest path that follows it to the graph's end (its bottom
// level): list schedules start the ready node with the most work still behind it first.
// `weights` has one entry per node.
std::vector<double> remaining_path_lengths(const Graph& graph, const std::vector<double>& weights);

// The edges that no longer path implies: removing every other edge keeps reachability the same.
std::vector<Edge> transitive_reduction(const Graph& graph);

// Per graph input, whether the model writes it in place (a node writes into a value that may share
// its memory: the input itself, a view of it, a list holding it). A caller's tensor given for such
// an input changes when the model runs, as it does in eager PyTorch.
std::vector<bool> inputs_written_in_place(const Graph& graph);

// Graphviz DOT of the graph: data edges solid, ordering edges dashed, nodes that launch no
// kernel drawn grey.
std::string to_dot(const Graph& graph);

}  // namespace opara
