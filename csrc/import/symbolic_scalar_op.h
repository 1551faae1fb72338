#pragma once

// The arithmetic a dynamic-shape program does on sizes (operator.mul, operator.floordiv,
// torch.sym_max, math.ceil, ...), as a node of numbers in and a number out that launches nothing:
// it runs on the host, also while a CUDA graph is captured, whose kernels then hold its value for
// the captured shape.

#include <memory>
#include <string>
#include <vector>

#include "import/dispatcher_node_op.h"

namespace opara {

// Whether `target` (an exported node's, "_operator.mul") is arithmetic on sizes.
bool is_symbolic_arithmetic(const std::string& target);

// `target` over `operands` (constants, or the node's runtime inputs, in the node's order), with
// Python's rules (floor division and modulo round towards minus infinity). nullptr where opara
// does not evaluate `target`.
std::shared_ptr<const NodeOp> symbolic_scalar_op(const std::string& target, std::vector<ArgumentSlot> operands);

}  // namespace opara
