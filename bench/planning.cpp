#include "planning.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>

#include "support/percentile.h"
#include "tools/model_inputs.h"

namespace opara::bench {

std::vector<at::Tensor> planning_inputs(const LoadedModel& model, const std::string& input_shape) {
  if (!input_shape.empty()) {
    return make_inputs(parse_input_shapes(input_shape, model.dtype), model.spec ? model.spec->seed : 0);
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

std::string node_head(const Graph& graph, const std::vector<NodeId>& nodes, std::size_t count) {
  std::vector<std::string> head;
  for (std::size_t k = 0; k < std::min(count, nodes.size()); ++k) {
    head.push_back(fmt::format("{} {}", nodes[k], graph.node(nodes[k]).kind));
  }
  return fmt::format("{}{}", fmt::join(head, ", "), nodes.size() > count ? ", ..." : "");
}

}  // namespace opara::bench
