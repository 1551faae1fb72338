#pragma once

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "opara/graph.h"

namespace opara::testing {

// A graph with `count` nodes and the given edges (from < to), written inline: node i reads the
// outputs of its predecessors, or the graph input when it has none.
inline Graph graph_from_edges(int count, const std::vector<std::pair<int, int>>& edges) {
  Graph graph;
  const ValueId input = graph.add_input("x");
  std::vector<std::vector<ValueId>> reads(count);
  for (const auto& [from, to] : edges) reads[to].push_back(from);
  for (int id = 0; id < count; ++id) {
    std::vector<ValueId> inputs;
    for (int from : reads[id]) inputs.push_back(graph.node(from).outputs[0]);
    if (inputs.empty()) inputs.push_back(input);
    graph.add_node("op" + std::to_string(id), inputs, {"Tensor"});
  }
  return graph;
}

// A random DAG: each forward pair is an edge with probability `density`.
inline Graph random_dag(int count, double density, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::bernoulli_distribution coin(density);
  std::vector<std::pair<int, int>> edges;
  for (int from = 0; from < count; ++from) {
    for (int to = from + 1; to < count; ++to) {
      if (coin(random)) edges.emplace_back(from, to);
    }
  }
  return graph_from_edges(count, edges);
}

}  // namespace opara::testing
