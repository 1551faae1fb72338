// torch.ops.opara.batched_inputs and inputs_with_rows: the graph set's one decision of which inputs
// carry the batch, and its padding, for the Python package's exports at each batch size.
#include <torch/library.h>

#include "opara/graph_set.h"

namespace opara::ext {
namespace {

std::vector<std::int64_t> batched_inputs(const std::vector<at::Tensor>& inputs,
                                         const std::optional<std::vector<std::int64_t>>& declared) {
  std::optional<std::vector<int>> given;
  if (declared) given = std::vector<int>(declared->begin(), declared->end());
  const std::vector<int> batched = find_batched_inputs(inputs, given, "opara.compile_graph_set");
  return {batched.begin(), batched.end()};
}

std::vector<at::Tensor> at_rows(const std::vector<at::Tensor>& inputs, const std::vector<std::int64_t>& batched,
                                std::int64_t rows) {
  return inputs_with_rows(inputs, std::vector<int>(batched.begin(), batched.end()), rows);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(opara, m) {
  m.def("batched_inputs(Tensor[] inputs, int[]? batched=None) -> int[]", &batched_inputs);
  m.def("inputs_with_rows(Tensor[] inputs, int[] batched, int rows) -> Tensor[]", &at_rows);
}

}  // namespace opara::ext
