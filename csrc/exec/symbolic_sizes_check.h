#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "opara/graph.h"

namespace opara {

// Whether `inputs` fit the sizes a dynamic-shape program was exported for
// (Graph::symbolic_input_sizes): each fixed size equal, each symbol one value for all its
// dimensions, within its range. Throws opara::Error naming the file, the input, the dimension and
// the size the program allows; nothing for a program without symbolic sizes.
void check_symbolic_sizes(const Graph& graph, const std::vector<at::Tensor>& inputs);

}  // namespace opara
