#pragma once

#include <random>

#include "opara/graph.h"

namespace opara::bench {

// A DAG shaped like a CNN or transformer, of about `nodes` nodes: blocks that fork into one to
// four branches of one to four operators and join again, a residual edge over some blocks, and a
// kernel-free view after some operators. Streams and events then grow with the graph as they do
// on real models, which a uniformly random DAG does not show.
inline Graph dnn_like_graph(int nodes, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  auto roll = [&random](int low, int high) { return std::uniform_int_distribution<int>(low, high)(random); };
  Graph graph;
  ValueId current = graph.add_input("x");
  auto add = [&](const char* kind, std::vector<ValueId> inputs, std::uint32_t flags = kLaunchesKernel) {
    return graph.node(graph.add_node(kind, std::move(inputs), {"Tensor"}, flags)).outputs[0];
  };
  while (static_cast<int>(graph.size()) < nodes) {
    const ValueId block_input = current;
    std::vector<ValueId> ends;
    for (int branch = roll(1, 4); branch > 0; --branch) {
      ValueId value = block_input;
      for (int depth = roll(1, 4); depth > 0; --depth) {
        value = add(depth % 2 ? "aten::conv2d" : "aten::relu", {value});
        if (roll(0, 9) == 0) value = add("aten::view", {value}, kView);
      }
      ends.push_back(value);
    }
    if (roll(0, 2) == 0) ends.push_back(block_input);  // residual
    current = ends.size() == 1 ? ends[0] : add("aten::cat", ends);
  }
  graph.add_output(current);
  return graph;
}

}  // namespace opara::bench
