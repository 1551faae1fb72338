#pragma once

#include <ATen/core/ivalue.h>

#include <vector>

#include "opara/costs.h"
#include "opara/export.h"
#include "opara/graph.h"

namespace opara {

// Runs the graph once on the CPU on `inputs` and records every node's argument and output
// shapes, for estimate_costs(). Throws opara::Error naming the node that fails.
OPARA_API std::vector<NodeShapes> record_shapes(const Graph& graph, const std::vector<c10::IValue>& inputs);

}  // namespace opara
