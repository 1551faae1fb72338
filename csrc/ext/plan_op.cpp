// torch.ops.opara.plan: a model's schedule as JSON, without compiling it.
#include <torch/library.h>

#include "ext/text_options.h"
#include "opara/load.h"
#include "opara/model_profiler.h"
#include "opara/plan.h"

namespace opara::ext {
namespace {

// Costs from `profile`, else from shapes recorded on the examples, else from the op table.
std::string plan_model(const std::string& path, const std::optional<std::vector<at::Tensor>>& example_inputs,
                       const std::optional<c10::Dict<std::string, std::string>>& options_dict) {
  const Options options = options_from_dict(options_dict);
  const Graph graph = load(path);
  const ModelCosts costs = model_costs(graph, example_inputs.value_or(std::vector<at::Tensor>{}), options.costs);
  Plan plan = make_plan(graph, options.plan, costs.costs);
  plan.cost_source = costs.source;
  return to_json(graph, plan);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(opara, m) {
  m.def("plan(str path, Tensor[]? example_inputs=None, Dict(str, str)? options=None) -> str", &plan_model);
}

}  // namespace opara::ext
