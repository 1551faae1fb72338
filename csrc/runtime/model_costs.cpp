#include "opara/model_costs.h"

#include "opara/record_shapes.h"

namespace opara {

ModelCosts model_costs(const Graph& graph, const std::vector<at::Tensor>& examples, const std::string& profile,
                       double ridge_point) {
  if (!profile.empty()) return {costs_from_profile(graph, profile), "profile"};
  if (examples.empty()) return {estimate_costs(graph, {}, ridge_point), "none"};
  std::vector<c10::IValue> cpu_inputs;
  for (const at::Tensor& example : examples) cpu_inputs.emplace_back(example.cpu());
  return {estimate_costs(graph, record_shapes(graph, cpu_inputs), ridge_point), "shapes"};
}

}  // namespace opara
