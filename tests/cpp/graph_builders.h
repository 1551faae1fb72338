#pragma once

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "opara/graph.h"

namespace opara::testing {

// A graph with `count` nodes and the given edges (from < to), written inline: node i reads the
// outputs of its predecessors, or the graph input when it has none.
// Nodes listed in `kernel_free` launch no kernel (a view, say); nodes listed in `writers` launch
// one that writes the graph input in place (state: a cache's new row), which they read first.
inline Graph graph_from_edges(int count, const std::vector<std::pair<int, int>>& edges,
                              const std::vector<int>& kernel_free = {}, const std::vector<int>& writers = {}) {
  Graph graph;
  const ValueId input = graph.add_input("x");
  std::vector<std::vector<ValueId>> reads(count);
  for (const auto& [from, to] : edges) reads[to].push_back(from);
  for (int id = 0; id < count; ++id) {
    const bool free = std::find(kernel_free.begin(), kernel_free.end(), id) != kernel_free.end();
    const bool writes = std::find(writers.begin(), writers.end(), id) != writers.end();
    std::vector<ValueId> inputs;
    if (writes) inputs.push_back(input);
    for (int from : reads[id]) inputs.push_back(graph.node(from).outputs[0]);
    if (inputs.empty()) inputs.push_back(input);
    graph.add_node(free ? "aten::view" : "op" + std::to_string(id), inputs, {"Tensor"},
                   free ? std::uint32_t{kView} : kLaunchesKernel | (writes ? std::uint32_t{kWritesInput} : 0U));
  }
  return graph;
}

// A random DAG: each forward pair is an edge with probability `density`.
// With `kernel_free_share` > 0, that share of the nodes launch no kernel; with `writer_share` > 0,
// that share of the kernel nodes write their input in place.
inline Graph random_dag(int count, double density, std::uint64_t seed, double kernel_free_share = 0,
                        double writer_share = 0) {
  std::mt19937_64 random(seed);
  std::bernoulli_distribution coin(density);
  std::vector<std::pair<int, int>> edges;
  for (int from = 0; from < count; ++from) {
    for (int to = from + 1; to < count; ++to) {
      if (coin(random)) edges.emplace_back(from, to);
    }
  }
  // Predecessors in a shuffled argument order, so "first successor" is not always the lowest id.
  std::shuffle(edges.begin(), edges.end(), random);
  std::vector<int> kernel_free;
  std::vector<int> writers;
  std::bernoulli_distribution free_coin(kernel_free_share);
  std::bernoulli_distribution writer_coin(writer_share);
  for (int id = 0; id < count; ++id) {
    if (kernel_free_share > 0 && free_coin(random)) {
      kernel_free.push_back(id);
    } else if (writer_share > 0 && writer_coin(random)) {
      writers.push_back(id);
    }
  }
  return graph_from_edges(count, edges, kernel_free, writers);
}

// The graph tests/data/profile_five_nodes.json was made for: four independent nodes and a cat.
inline Graph profile_fixture_graph() {
  Graph graph;
  const ValueId x = graph.add_input("x");
  std::vector<ValueId> outputs;
  for (const char* kind : {"aten::conv2d", "aten::conv2d", "aten::relu", "aten::add"}) {
    outputs.push_back(graph.node(graph.add_node(kind, {x}, {"Tensor"})).outputs[0]);
  }
  graph.add_output(graph.node(graph.add_node("aten::cat", outputs, {"Tensor"})).outputs[0]);
  return graph;
}

}  // namespace opara::testing
