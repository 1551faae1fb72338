#pragma once

#include <ATen/core/ivalue.h>

#include <vector>

#include "opara/graph.h"
#include "opara/plan.h"

namespace opara {

// Runs the graph once on `device` (the model's own: no copy of its inputs and weights elsewhere)
// on `inputs` and records every node's argument and output shapes, for estimate_costs(). The
// caller passes inputs the run may write. Throws opara::Error naming the node that fails.
std::vector<NodeShapes> record_shapes(const Graph& graph, const std::vector<c10::IValue>& inputs,
                                      c10::Device device = c10::kCPU);

}  // namespace opara
