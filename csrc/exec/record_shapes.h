#pragma once

#include <ATen/core/ivalue.h>

#include <vector>

#include "opara/graph.h"
#include "opara/plan.h"

namespace opara {

// Runs the graph once on the CPU on `inputs` and records every node's argument and output
// shapes, for estimate_costs(). Throws opara::Error naming the node that fails.
std::vector<NodeShapes> record_shapes(const Graph& graph, const std::vector<c10::IValue>& inputs);

}  // namespace opara
