#pragma once

// What the placement passes share: which side of the PCIe bus a node's values live on, what a
// CPU placement of a node would copy, and the check that costs belong to a graph.

#include <vector>

#include "graph/graph_analysis.h"  // model_output_mask: a returned value must end on the GPU
#include "opara/graph.h"
#include "opara/placement.h"
#include "overflow/placements.h"

namespace opara::overflow {

// kCpu and kHost nodes both keep their values in host memory.
inline bool on_cpu_side(Placement placement) {
  return placement != Placement::kGpu;
}

// The side a node that launches no kernel takes: its first input's producer's (model inputs and
// constants live on the GPU).
Placement follow_producer(const Graph& graph, const std::vector<Placement>& placement, const Node& node);

// Microseconds of the copies `node` would need on the CPU side with everything else where
// `placement` says: inputs made on the GPU side copied to the host, outputs read on the GPU side
// (or returned) copied back. Each value once, however many nodes read it.
double cpu_transfer_us(const Graph& graph, const std::vector<Placement>& placement, const PlacementCosts& costs,
                       const std::vector<bool>& is_output, const Node& node);

// Throws opara::Error when `costs` (or `placement`, when given) has another size than `graph`.
void check_sizes(const Graph& graph, const PlacementCosts& costs, const std::vector<Placement>* placement = nullptr);

}  // namespace opara::overflow
