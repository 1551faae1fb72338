#include "overflow_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <optional>
#include <sstream>

#include "compile/overflow_choice.h"
#include "opara/error.h"
#include "opara/placement.h"
#include "opara/profile.h"
#include "overflow/cpu_steps.h"
#include "overflow/placements.h"
#include "overflow/segments.h"
#include "planning.h"
#include "support/internal_assert.h"

namespace opara::bench {
namespace {

constexpr std::size_t kListHead = 12;

// The placement costs of the profile when it is a full one (Comm+SD's own error when it is not);
// nullopt without a profile, or with one of classes and demands only and another policy.
std::optional<PlacementCosts> costs_of(const LoadedModel& model, const std::vector<at::Tensor>& inputs,
                                       const OverflowOptions& overflow, const std::string& profile) {
  if (profile.empty()) return std::nullopt;
  if (overflow.policy != OverflowPolicy::kCommSd) {
    std::ifstream file(profile);
    std::stringstream text;
    text << file.rdbuf();
    if (!is_full_profile(text.str())) return std::nullopt;
  }
  return profile_placement_costs(model.graph, inputs, profile, overflow.alpha_us);
}

std::string node_list(const Graph& graph, const std::vector<NodeId>& nodes) {
  return node_head(graph, nodes, kListHead);
}

// The policy's placement; Comm+SD's rule and estimate are printed and put in `json`.
std::vector<Placement> chosen_placement(const Graph& graph, const std::vector<at::Tensor>& inputs,
                                        const OverflowOptions& overflow, const std::string& profile,
                                        const std::optional<PlacementCosts>& costs, const CommSdOptions& comm_sd,
                                        nlohmann::json& json, std::FILE* table) {
  if (overflow.policy != OverflowPolicy::kCommSd) {
    return choose_placement(graph, inputs, overflow, profile, comm_sd.gpu_streams).placement;
  }
  if (!costs) throw Error("--overflow comm_sd needs --profile: a full profile has the times it compares");
  const PlacementReport report = comm_sd_placement(graph, *costs, comm_sd);
  fmt::print(table,
             "comm_sd        {} nodes pass the rule after {} passes ({}); {} of {} groups kept by the estimate\n",
             report.rule_moves.size(), report.iterations, report.converged ? "converged" : "stopped at the cap",
             report.moves_kept, report.moves_tried);
  json["rule_moves"] = report.rule_moves;
  json["iterations"] = report.iterations;
  json["converged"] = report.converged;
  json["moves_tried"] = report.moves_tried;
  json["moves_kept"] = report.moves_kept;
  return report.placement;
}

// What compile() runs: CPU nodes whose copies would break a written alias group go back.
std::vector<Placement> runnable_as_compiled(const Graph& graph, const std::vector<Placement>& placement,
                                            nlohmann::json& json, std::FILE* table) {
  std::vector<bool> host_nodes(graph.size(), false);
  for (const Node& node : graph.nodes()) host_nodes[node.id] = placement[node.id] == Placement::kHost;
  std::vector<Placement> runnable = runnable_placement(graph, placement, host_nodes);
  std::vector<NodeId> taken_back;
  for (const Node& node : graph.nodes()) {
    const bool chosen = placement[node.id] == Placement::kCpu && node.has(kLaunchesKernel);
    if (chosen && runnable[node.id] != Placement::kCpu) taken_back.push_back(node.id);
  }
  if (!taken_back.empty()) {
    fmt::print(table, "aliasing       {} CPU nodes back on the GPU (their copies would miss in-place writes): {}\n",
               taken_back.size(), node_list(graph, taken_back));
  }
  json["taken_back"] = taken_back;
  return runnable;
}

void report_placement(const Graph& graph, const std::vector<Placement>& placement, nlohmann::json& json,
                      std::FILE* table) {
  std::vector<std::string> names;
  std::vector<NodeId> cpu, host;
  for (NodeId id = 0; id < static_cast<NodeId>(graph.size()); ++id) {
    names.emplace_back(to_string(placement[id]));
    if (placement[id] == Placement::kCpu) cpu.push_back(id);
    if (placement[id] == Placement::kHost) host.push_back(id);
  }
  fmt::print(table, "placement      {} on the GPU, {} on the CPU, {} on the host (not capturable)\n",
             graph.size() - cpu.size() - host.size(), cpu.size(), host.size());
  if (!cpu.empty()) fmt::print(table, "on the CPU     {}\n", node_list(graph, cpu));
  if (!host.empty()) fmt::print(table, "on the host    {}\n", node_list(graph, host));
  json["placement"] = names;
  json["cpu_nodes"] = cpu;
  json["host_nodes"] = host;
}

void report_prediction(const Graph& graph, const std::vector<Placement>& placement, const PlacementCosts& costs,
                       const CommSdOptions& comm_sd, OverflowPolicy policy, nlohmann::json& json, std::FILE* table) {
  const double none_us =
      estimate_makespan(graph, gpu_placement(graph), costs, comm_sd.gpu_streams, comm_sd.host_threads);
  const double chosen_us = estimate_makespan(graph, placement, costs, comm_sd.gpu_streams, comm_sd.host_threads);
  fmt::print(table, "predicted      none {:.1f} us, {} {:.1f} us ({} GPU streams, {} host threads, split {:.0f} us)\n",
             none_us, to_string(policy), chosen_us, comm_sd.gpu_streams, comm_sd.host_threads, costs.split_us());
  json["predicted_none_us"] = none_us;
  json["predicted_us"] = chosen_us;
}

// As compile() cuts them: with CPU overflow, graph work a host step does not read runs during it.
void report_segments(const Graph& graph, const std::vector<Placement>& placement, OverflowPolicy policy,
                     nlohmann::json& json, std::FILE* table) {
  const HostOverlap overlap = policy == OverflowPolicy::kNone ? HostOverlap::kNone : HostOverlap::kSplit;
  const std::vector<Segment> segments = split_segments(graph, host_mask(placement), overlap);
  std::vector<std::string> shown;
  nlohmann::json segment_json = nlohmann::json::array();
  for (const Segment& segment : segments) {
    const bool cpu_step = step_runs_on_cpu(graph, segment, placement);
    const char* kind = segment.kind == SegmentKind::kGraph ? "graph" : cpu_step ? "cpu" : "host";
    shown.push_back(fmt::format("{} {}{}", kind, segment.nodes.size(),
                                segment.during_next_host_step ? " (during the next host step)" : ""));
    segment_json.push_back({{"kind", segment.kind == SegmentKind::kGraph ? "graph" : "host"},
                            {"on_cpu", cpu_step},
                            {"during_next_host_step", segment.during_next_host_step},
                            {"nodes", segment.nodes},
                            {"inputs", segment.input_values.size()},
                            {"outputs", segment.output_values.size()}});
  }
  fmt::print(table, "segments       {}: {}\n", segments.size(), fmt::join(shown, ", "));
  const std::vector<std::string> problems = validate_segments(graph, segments);
  OPARA_ASSERT(problems.empty(), "invalid segments: {}", fmt::join(problems, "; "));
  json["segments"] = segment_json;
}

}  // namespace

nlohmann::json overflow_report(const LoadedModel& model, const std::vector<at::Tensor>& inputs,
                               const OverflowOptions& overflow, const std::string& profile, int gpu_streams,
                               std::FILE* table) {
  const Graph& graph = model.graph;
  const std::optional<PlacementCosts> costs = costs_of(model, inputs, overflow, profile);
  CommSdOptions comm_sd;
  comm_sd.gpu_streams = std::max(1, gpu_streams);
  nlohmann::json json = {{"policy", to_string(overflow.policy)}, {"alpha_us", overflow.alpha_us}};
  const std::vector<Placement> chosen = chosen_placement(graph, inputs, overflow, profile, costs, comm_sd, json, table);
  const std::vector<Placement> placement = runnable_as_compiled(graph, chosen, json, table);
  report_placement(graph, placement, json, table);
  if (costs) report_prediction(graph, placement, *costs, comm_sd, overflow.policy, json, table);
  report_segments(graph, placement, overflow.policy, json, table);
  return json;
}

}  // namespace opara::bench
