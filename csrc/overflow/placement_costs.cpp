// PlacementCosts from a recorded profile: the one place that knows the profile's units and gaps.
#include <fmt/format.h>

#include <map>
#include <numeric>

#include "opara/error.h"
#include "opara/placement.h"
#include "overflow/placements.h"

namespace opara {
namespace {

// Element sizes of the dtypes a profile names (c10's names, as ProfileInput stores them).
std::int64_t element_bytes(const std::string& dtype) {
  static const std::map<std::string, std::int64_t> sizes = {
      {"Double", 8}, {"Float", 4}, {"Half", 2}, {"BFloat16", 2}, {"Long", 8},         {"Int", 4},
      {"Short", 2},  {"Char", 1},  {"Byte", 1}, {"Bool", 1},     {"ComplexFloat", 8}, {"ComplexDouble", 16}};
  const auto found = sizes.find(dtype);
  return found == sizes.end() ? 0 : found->second;
}

bool is_tensor(const Value& value) {
  return value.type == "Tensor";
}

// Bytes of each output of `node`: the recorded shapes when they are one tensor per output (or
// all of one list output), else the profile's bytes_out split evenly over the tensor outputs.
void output_bytes(const Graph& graph, const Node& node, const NodeProfile& profile, const NodeShapes* shapes,
                  std::vector<double>& bytes) {
  if (shapes != nullptr && !shapes->outputs.empty()) {
    if (shapes->outputs.size() == node.outputs.size()) {
      for (std::size_t k = 0; k < node.outputs.size(); ++k) bytes[node.outputs[k]] = shapes->outputs[k].bytes();
      return;
    }
    if (node.outputs.size() == 1) {
      bytes[node.outputs[0]] = std::accumulate(shapes->outputs.begin(), shapes->outputs.end(), 0.0,
                                               [](double sum, const TensorShape& t) { return sum + t.bytes(); });
      return;
    }
  }
  std::size_t tensors = 0;
  for (ValueId output : node.outputs) tensors += is_tensor(graph.value(output));
  for (ValueId output : node.outputs) {
    if (is_tensor(graph.value(output))) bytes[output] = static_cast<double>(profile.bytes_out) / tensors;
  }
}

}  // namespace

PlacementCosts placement_costs(const Graph& graph, const Profile& profile, const std::vector<NodeShapes>& shapes,
                               double alpha_us) {
  const std::string& source = graph.source_path.empty() ? profile.model_path : graph.source_path;
  if (profile.nodes.size() != graph.size()) {
    throw Error(fmt::format("{}: the profile has {} nodes, the model {}: profile this model again", source,
                            profile.nodes.size(), graph.size()));
  }
  if (!shapes.empty() && shapes.size() != graph.size()) {
    throw Error(
        fmt::format("{}: shapes were recorded for {} nodes, the model has {}", source, shapes.size(), graph.size()));
  }
  PlacementCosts costs;
  costs.alpha_us = alpha_us;
  costs.h2d_bytes_per_s = profile.h2d_bytes_per_s;
  costs.d2h_bytes_per_s = profile.d2h_bytes_per_s;
  costs.gpu_us.assign(graph.size(), 0);
  costs.cpu_us.assign(graph.size(), 0);
  costs.value_bytes.assign(graph.values().size(), 0);
  for (const Node& node : graph.nodes()) {
    const NodeProfile& measured = profile.nodes[node.id];
    costs.gpu_us[node.id] = measured.gpu_ns / 1000;
    // No host time for a node that does work means it was not measured, not that it is free.
    const bool unmeasured = measured.cpu_ns <= 0 && node.has(kLaunchesKernel);
    costs.cpu_us[node.id] = unmeasured ? PlacementCosts::kUnknownUs : measured.cpu_ns / 1000;
    output_bytes(graph, node, measured, shapes.empty() ? nullptr : &shapes[node.id], costs.value_bytes);
  }
  // The profile's inputs are the model's tensor inputs, in order.
  std::size_t next = 0;
  for (ValueId input : graph.inputs()) {
    if (!is_tensor(graph.value(input)) || next >= profile.inputs.size()) continue;
    const ProfileInput& shape = profile.inputs[next++];
    const std::int64_t numel =
        std::accumulate(shape.sizes.begin(), shape.sizes.end(), std::int64_t{1}, std::multiplies<>());
    costs.value_bytes[input] = static_cast<double>(numel * element_bytes(shape.dtype));
  }
  return costs;
}

}  // namespace opara
