#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace opara {

// The TorchScript module's own forward on `inputs` (eval mode, no grad), flattened to tensors:
// what the imported graph must reproduce. Inputs are cloned first, since a model may write them.
std::vector<at::Tensor> torchscript_forward(const std::string& path, const std::vector<at::Tensor>& inputs);

}  // namespace opara
