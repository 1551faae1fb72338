// torch.ops.opara.in_place_twin: the importer's rule for which functional writes of state become
// in-place ops, asked by the Python package instead of keeping a list of its own.
#include <torch/library.h>

#include "opara/load.h"

TORCH_LIBRARY_FRAGMENT(opara, m) {
  m.def("in_place_twin(str target) -> str?", &opara::in_place_twin);
}
