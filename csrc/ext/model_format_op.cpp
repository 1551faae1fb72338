// torch.ops.opara.model_format: which of the two archive formats a model file is (told apart by
// content, as opara::load tells them), so that the Python package never tries one reader on the
// other's file.
#include <torch/library.h>

#include "opara/load.h"

namespace opara::ext {
namespace {

std::string model_format(const std::string& path) {
  return detect_format(path) == ModelFormat::kTorchScript ? "TorchScript" : "torch.export";
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(opara, m) {
  m.def("model_format(str path) -> str", &model_format);
}

}  // namespace opara::ext
