// torch.ops.opara.model_device: where a model compiles (opara::model_device), for the Python
// package, so that the rule lives in one language.
#include <torch/library.h>

#include "ext/text_options.h"
#include "opara/options.h"

namespace opara::ext {
namespace {

std::string model_device_text(const std::string& name, const std::vector<at::Tensor>& example_inputs,
                              const std::optional<c10::Dict<std::string, std::string>>& options) {
  return model_device(options_from_dict(options), example_inputs, name).str();
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(opara, m) {
  m.def("model_device(str name, Tensor[] example_inputs, Dict(str, str)? options=None) -> str", &model_device_text);
}

}  // namespace opara::ext
