// The placement vocabulary: names, the GPU-only placement, host masks for split_segments, a
// placement from a set of CPU nodes, and the side helpers the passes share (sides.h).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

#include "opara/error.h"
#include "opara/placement.h"
#include "overflow/placements.h"
#include "overflow/sides.h"

namespace opara {

std::string_view to_string(Placement placement) {
  switch (placement) {
    case Placement::kGpu: return "gpu";
    case Placement::kCpu: return "cpu";
    case Placement::kHost: return "host";
  }
  return "?";
}

namespace {

// Each policy's name, written once for to_string and parse_overflow_policy.
constexpr std::array<std::pair<OverflowPolicy, std::string_view>, 3> kOverflowPolicies = {{
    {OverflowPolicy::kNone, "none"},
    {OverflowPolicy::kCommSd, "comm_sd"},
    {OverflowPolicy::kManual, "manual"},
}};

}  // namespace

std::string_view to_string(OverflowPolicy policy) {
  for (const auto& [value, name] : kOverflowPolicies) {
    if (value == policy) return name;
  }
  return "?";
}

OverflowPolicy parse_overflow_policy(std::string_view name) {
  for (const auto& [value, known] : kOverflowPolicies) {
    if (known == name) return value;
  }
  throw Error(fmt::format("unknown overflow policy '{}': use none, comm_sd or manual", name));
}

double PlacementCosts::h2d_us(double bytes) const {
  return h2d_bytes_per_s > 0 ? bytes * 1e6 / h2d_bytes_per_s : 0;  // exact for whole results
}

double PlacementCosts::d2h_us(double bytes) const {
  return d2h_bytes_per_s > 0 ? bytes * 1e6 / d2h_bytes_per_s : 0;
}

std::vector<Placement> gpu_placement(const Graph& graph) {
  return placement_with_cpu_nodes(graph, std::vector<bool>(graph.size(), false));
}

std::vector<bool> host_mask(const std::vector<Placement>& placement) {
  std::vector<bool> mask(placement.size(), false);
  for (std::size_t k = 0; k < placement.size(); ++k) mask[k] = overflow::on_cpu_side(placement[k]);
  return mask;
}

std::vector<Placement> placement_with_cpu_nodes(const Graph& graph, const std::vector<bool>& cpu) {
  std::vector<bool> host(graph.size(), false);
  for (const Node& node : graph.nodes()) host[node.id] = node.has(kNotCapturable);
  return placement_with_cpu_nodes(graph, cpu, host);
}

std::vector<Placement> placement_with_cpu_nodes(const Graph& graph, const std::vector<bool>& cpu,
                                                const std::vector<bool>& host) {
  for (const auto* mask : {&cpu, &host}) {
    if (mask->size() != graph.size()) {
      throw Error(fmt::format("{}: the {} mask has {} entries for a graph of {} nodes", graph.source_path,
                              mask == &cpu ? "CPU" : "host", mask->size(), graph.size()));
    }
  }
  std::vector<Placement> placement(graph.size(), Placement::kGpu);
  for (const Node& node : graph.nodes()) {  // ids are a topological order: producers come first
    if (host[node.id]) {
      placement[node.id] = Placement::kHost;
    } else if (!node.has(kLaunchesKernel)) {
      placement[node.id] = overflow::follow_producer(graph, placement, node);
    } else {
      placement[node.id] = cpu[node.id] ? Placement::kCpu : Placement::kGpu;
    }
  }
  return placement;
}

namespace overflow {

Placement follow_producer(const Graph& graph, const std::vector<Placement>& placement, const Node& node) {
  if (node.inputs.empty()) return Placement::kGpu;
  const NodeId producer = graph.value(node.inputs.front()).producer;
  if (producer == kNoNode) return Placement::kGpu;
  return on_cpu_side(placement[producer]) ? Placement::kCpu : Placement::kGpu;
}

double cpu_transfer_us(const Graph& graph, const std::vector<Placement>& placement, const PlacementCosts& costs,
                       const std::vector<bool>& is_output, const Node& node) {
  double us = 0;
  std::vector<ValueId> inputs = node.inputs;
  std::sort(inputs.begin(), inputs.end());
  inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());
  for (ValueId input : inputs) {
    const NodeId producer = graph.value(input).producer;
    if (producer == kNoNode || !on_cpu_side(placement[producer])) us += costs.d2h_us(costs.value_bytes[input]);
  }
  for (ValueId output : node.outputs) {
    const auto& users = graph.value(output).users;
    const bool read_on_gpu =
        std::any_of(users.begin(), users.end(), [&](NodeId user) { return !on_cpu_side(placement[user]); });
    if (is_output[output] || read_on_gpu) us += costs.h2d_us(costs.value_bytes[output]);
  }
  return us;
}

void check_sizes(const Graph& graph, const PlacementCosts& costs, const std::vector<Placement>* placement) {
  const auto fail = [&](const char* what, std::size_t have, std::size_t want) {
    throw Error(fmt::format("{}: the {} has {} entries for a graph of {}: it was made for another model",
                            graph.source_path.empty() ? "graph" : graph.source_path, what, have, want));
  };
  if (costs.gpu_us.size() != graph.size()) fail("placement costs' gpu_us", costs.gpu_us.size(), graph.size());
  if (costs.cpu_us.size() != graph.size()) fail("placement costs' cpu_us", costs.cpu_us.size(), graph.size());
  if (costs.value_bytes.size() != graph.values().size()) {
    fail("placement costs' value_bytes", costs.value_bytes.size(), graph.values().size());
  }
  if (placement != nullptr && placement->size() != graph.size()) fail("placement", placement->size(), graph.size());
}

}  // namespace overflow
}  // namespace opara
