#include "tools/reference_forward.h"

#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/serialization/import.h>

#include <string>

#include "exec/first_line.h"
#include "exec/outputs.h"
#include "opara/error.h"

namespace opara {

std::vector<at::Tensor> torchscript_forward(const std::string& path, const std::vector<at::Tensor>& inputs) {
  torch::jit::Module module = torch::jit::load(path);
  module.eval();
  c10::AutoGradMode no_grad(false);
  std::vector<c10::IValue> arguments;
  std::vector<std::string> shapes;
  for (const at::Tensor& input : inputs) {
    arguments.emplace_back(input.clone());
    shapes.push_back(fmt::format("{}{}", c10::toString(input.scalar_type()), c10::str(input.sizes())));
  }
  try {
    return flatten_tensors({module.forward(arguments)});
  } catch (const std::exception& error) {
    throw Error(
        fmt::format("{}: the module's own forward fails on inputs {} ({}). Give inputs the model takes "
                    "(--input-shape, or the shapes in its sidecar .json)",
                    path, fmt::join(shapes, ", "), first_line(error)));
  }
}

}  // namespace opara
