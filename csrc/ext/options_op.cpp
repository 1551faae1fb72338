// torch.ops.opara.check_options: the options text parsed as compile() would parse it, so that a
// caller that compiles later (the torch.compile backend, at a graph's first call) can refuse a bad
// option at once, naming it.
#include <torch/library.h>

#include "ext/text_options.h"

namespace opara::ext {
namespace {

void check_options(const c10::Dict<std::string, std::string>& options) {
  (void)options_from_dict(options);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(opara, m) {
  m.def("check_options(Dict(str, str) options) -> ()", &check_options);
}

}  // namespace opara::ext
