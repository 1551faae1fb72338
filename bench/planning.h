#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "model_loading.h"
#include "opara/costs.h"
#include "opara/plan.h"

namespace opara::bench {

// Where Alg. 2's costs come from: --profile, else shapes recorded on example inputs, else the op
// table alone.
struct CostSettings {
  std::string profile;
  double ridge_point = kDefaultRidgePoint;
  bool allow_profile_mismatch = false;  // warn, rather than refuse, a profile of another model or shape
};

struct ModelCosts {
  std::vector<NodeCost> costs;
  std::string source;  // "profile", "shapes" or "none"
};

// `inputs` may be empty: the costs then come from the profile or the op table. A full profile
// must be of this model file and, when `inputs` are given, of their shapes.
ModelCosts model_costs(const LoadedModel& model, const std::vector<at::Tensor>& inputs, const CostSettings& settings);

// The example inputs planning records shapes on: the sidecar's, or --input-shape; none when the
// model has neither.
std::vector<at::Tensor> planning_inputs(const LoadedModel& model, const std::string& input_shape);

struct TimedPlan {
  Plan plan;
  double plan_us = 0;  // median over `repeats` runs of make_plan (allocation + events + order)
};

TimedPlan timed_plan(const Graph& graph, const PlanOptions& options, const ModelCosts& costs, int repeats = 25);

}  // namespace opara::bench
