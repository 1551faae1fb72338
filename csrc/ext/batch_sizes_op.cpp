// torch.ops.opara.batch_sizes: a graph set's buckets as the library checks them, so that the Python
// package refuses bad ones before it exports at a size that cannot be, with the library's words.
#include <torch/library.h>

#include "opara/graph_set.h"

namespace opara::ext {
namespace {

std::vector<std::int64_t> batch_sizes(const std::string& source, const std::vector<std::int64_t>& sizes) {
  return checked_batch_sizes(sizes, source);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(opara, m) {
  m.def("batch_sizes(str source, int[] sizes) -> int[]", &batch_sizes);
}

}  // namespace opara::ext
