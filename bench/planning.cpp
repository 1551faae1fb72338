#include "planning.h"

#include <algorithm>
#include <chrono>

#include "opara/eager_executor.h"
#include "opara/model_inputs.h"
#include "percentile.h"

namespace opara::bench {

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

std::vector<double> critical_path_priorities(const Graph& graph, const std::vector<c10::IValue>& arguments) {
  std::vector<double> seconds(graph.size(), 0);  // the fastest of three runs, per node
  EagerExecutor executor(graph, c10::kCPU);
  for (int round = 0; round < 3; ++round) {
    auto last = std::chrono::steady_clock::now();
    executor.set_observer([&](NodeId id, const auto&, const auto&) {
      const auto now = std::chrono::steady_clock::now();
      const double elapsed = std::chrono::duration<double>(now - last).count();
      seconds[id] = round == 0 ? elapsed : std::min(seconds[id], elapsed);
      last = now;
    });
    executor.run(arguments);
  }
  std::vector<double> remaining(graph.size(), 0);
  for (auto id = static_cast<NodeId>(graph.size()) - 1; id >= 0; --id) {
    double after = 0;
    for (NodeId next : graph.node(id).successors) after = std::max(after, remaining[next]);
    remaining[id] = seconds[id] + after;
  }
  return remaining;
}

}  // namespace opara::bench
