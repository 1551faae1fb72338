#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "model_loading.h"
#include "opara/model_profiler.h"
#include "opara/plan.h"

namespace opara::bench {

// The example inputs planning records shapes on: the sidecar's, or --input-shape; none when the
// model has neither.
std::vector<at::Tensor> planning_inputs(const LoadedModel& model, const std::string& input_shape);

struct TimedPlan {
  Plan plan;
  double plan_us = 0;  // median over `repeats` runs of make_plan (allocation + events + order)
};

TimedPlan timed_plan(const Graph& graph, const PlanOptions& options, const ModelCosts& costs, int repeats = 25);

// The first `count` of `nodes` as "id kind", joined by commas, with ", ..." when there are more.
std::string node_head(const Graph& graph, const std::vector<NodeId>& nodes, std::size_t count);

}  // namespace opara::bench
