// torch.ops.opara.package_info: what a package was made for (opara.load reads its name and output
// structure from it).
#include <torch/library.h>

#include <nlohmann/json.hpp>

#include "opara/package.h"

namespace opara::ext {
namespace {

std::string package_info(const std::string& path) {
  const PackageInfo info = read_package_info(path);
  return nlohmann::json{{"name", info.name},
                        {"opara", info.opara_version},
                        {"torch", info.torch_version},
                        {"device", info.device},
                        {"cuda_capability", info.cuda_capability},
                        {"cpu_isa", info.cpu_isa},
                        {"options", info.options},
                        {"regions", info.regions},
                        {"inputs", info.input_signature.size()},
                        {"example_inputs", info.holds_example_inputs},
                        {"folded_inputs", info.folded_inputs},
                        {"out_spec", info.out_spec},
                        {"choice", {{"machine", info.choice.machine}, {"options", info.choice.options}}}}
      .dump();
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(opara, m) {
  m.def("package_info(str path) -> str", &package_info);
}

}  // namespace opara::ext
