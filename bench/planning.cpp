#include "planning.h"

#include <algorithm>
#include <chrono>

#include "opara/model_inputs.h"
#include "opara/profile.h"
#include "opara/record_shapes.h"
#include "percentile.h"

namespace opara::bench {

ModelCosts model_costs(const LoadedModel& model, const std::vector<at::Tensor>& inputs, const CostSettings& settings) {
  if (!settings.profile.empty()) {
    ProfileMatch match;
    match.allow_mismatch = settings.allow_profile_mismatch;
    match.model_hash = hash_model_file(model.path);
    if (!inputs.empty()) {
      std::vector<ProfileInput> shapes;
      for (const at::Tensor& input : inputs) {
        shapes.push_back(ProfileInput{input.sizes().vec(), c10::toString(input.scalar_type())});
      }
      match.inputs = std::move(shapes);
    }
    return {costs_from_profile(model.graph, settings.profile, match), "profile"};
  }
  if (inputs.empty()) return {estimate_costs(model.graph, {}, settings.ridge_point), "none"};
  const auto shapes = record_shapes(model.graph, std::vector<c10::IValue>(inputs.begin(), inputs.end()));
  return {estimate_costs(model.graph, shapes, settings.ridge_point), "shapes"};
}

std::vector<at::Tensor> planning_inputs(const LoadedModel& model, const std::string& input_shape) {
  if (!input_shape.empty()) {
    return make_inputs(parse_input_shapes(input_shape), model.spec ? model.spec->seed : 0);
  }
  if (model.spec) return make_inputs(model.spec->inputs, model.spec->seed);
  return {};
}

TimedPlan timed_plan(const Graph& graph, const PlanOptions& options, const ModelCosts& costs, int repeats) {
  TimedPlan result;
  std::vector<double> samples;
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    const auto started = std::chrono::steady_clock::now();
    result.plan = make_plan(graph, options, costs.costs);
    samples.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started).count());
  }
  result.plan_us = percentile(samples, 0.5);
  result.plan.cost_source = costs.source;
  return result;
}

}  // namespace opara::bench
