#include "opara/reference_forward.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/jit/serialization/import.h>

#include "opara/outputs.h"

namespace opara {

std::vector<at::Tensor> torchscript_forward(const std::string& path, const std::vector<at::Tensor>& inputs) {
  torch::jit::Module module = torch::jit::load(path);
  module.eval();
  c10::AutoGradMode no_grad(false);
  std::vector<c10::IValue> arguments;
  for (const at::Tensor& input : inputs) arguments.emplace_back(input.clone());
  return flatten_tensors({module.forward(arguments)});
}

}  // namespace opara
