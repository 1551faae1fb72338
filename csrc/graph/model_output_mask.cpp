#include "graph/graph_analysis.h"

namespace opara {

std::vector<bool> model_output_mask(const Graph& graph) {
  std::vector<bool> is_output(graph.values().size(), false);
  for (ValueId output : graph.outputs()) is_output[output] = true;
  return is_output;
}

}  // namespace opara
