#pragma once

#include <ATen/core/ivalue.h>

#include <vector>

#include "exec/node_op.h"
#include "opara/plan.h"

namespace opara {

// The shapes of one node's call: its full argument list (constants such as weights folded back
// in, through NodeOp::call_arguments) and its results.
NodeShapes node_shapes(const NodeOp& op, const std::vector<c10::IValue>& inputs,
                       const std::vector<c10::IValue>& outputs);

}  // namespace opara
