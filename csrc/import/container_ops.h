#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <optional>

namespace opara {

// The JIT interpreter builds and takes apart lists, tuples and dicts with its own instructions,
// so these prim nodes have no registered Operation. This returns one for such a node, or
// nullopt for any other kind.
std::optional<torch::jit::Operation> container_operation(const torch::jit::Node* node);

}  // namespace opara
