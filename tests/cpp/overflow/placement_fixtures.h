#pragma once

// Hand-made placement costs: copy bandwidths of 1e6 bytes per second make one byte one microsecond,
// so a test's numbers read as times.

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "opara/graph.h"
#include "opara/placement.h"
#include "overflow/placements.h"

namespace opara::testing {

inline PlacementCosts microsecond_costs(const Graph& graph, double gpu_us, double cpu_us, double bytes = 0) {
  PlacementCosts costs;
  costs.gpu_us.assign(graph.size(), gpu_us);
  costs.cpu_us.assign(graph.size(), cpu_us);
  costs.value_bytes.assign(graph.values().size(), bytes);
  costs.h2d_bytes_per_s = 1e6;
  costs.d2h_bytes_per_s = 1e6;
  costs.alpha_us = 100;
  costs.graph_launch_us = 5;
  costs.sync_us = 10;
  return costs;
}

// The output value of node `id` in graphs from graph_from_edges (value 0 is the input x).
inline ValueId out(NodeId id) {
  return id + 1;
}

// A random DAG like random_dag, with a share of nodes that launch no kernel (views) and a share
// that cannot be captured; the last node's output is the model's.
inline Graph random_flagged_dag(int count, double density, std::uint64_t seed, double view_share, double host_share) {
  std::mt19937_64 random(seed);
  std::bernoulli_distribution edge(density), view(view_share), host(host_share);
  Graph graph;
  const ValueId input = graph.add_input("x");
  for (int id = 0; id < count; ++id) {
    std::vector<ValueId> inputs;
    for (int from = 0; from < id; ++from) {
      if (edge(random)) inputs.push_back(graph.node(from).outputs[0]);
    }
    if (inputs.empty()) inputs.push_back(input);
    std::uint32_t flags = kLaunchesKernel;
    if (view(random)) flags = kView;
    if (host(random)) flags = kLaunchesKernel | kNotCapturable;
    graph.add_node(flags == kView ? "aten::view" : "op", inputs, {"Tensor"}, flags);
  }
  graph.add_output(graph.node(count - 1).outputs[0]);
  return graph;
}

}  // namespace opara::testing
