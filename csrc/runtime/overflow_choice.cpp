#include "overflow_choice.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "opara/error.h"
#include "opara/profile.h"
#include "opara/record_shapes.h"

namespace opara {
namespace {

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<Placement> manual_choice(const Graph& graph, const std::vector<std::string>& names) {
  if (names.empty()) {
    throw Error(
        fmt::format("{}: Options::overflow = manual names no node; list node ids or kinds in "
                    "Options::cpu_nodes (\"12\", \"aten::lstm_cell\"), or a .json file {{\"cpu\": [...]}}",
                    graph.source_path));
  }
  if (names.size() == 1 && ends_with(names.front(), ".json")) return manual_placement_file(graph, names.front());
  return manual_placement(graph, names);
}

PlacementCosts profile_placement_costs(const Graph& graph, const std::vector<at::Tensor>& examples,
                                       const Options& options) {
  if (options.profile.empty()) {
    throw Error(
        fmt::format("{}: Options::overflow = comm_sd compares each node's GPU and CPU times, which come "
                    "from a full profile: set Options::profile (opara-bench profile --model M --out P "
                    "records one), or name the CPU nodes with overflow = manual",
                    graph.source_path));
  }
  std::ifstream file(options.profile);
  if (!file) throw Error(fmt::format("{}: cannot read the profile; check the path", options.profile));
  std::stringstream text;
  text << file.rdbuf();
  if (!is_full_profile(text.str())) {
    throw Error(
        fmt::format("{}: Options::overflow = comm_sd needs a full profile with GPU and CPU times; this one "
                    "holds only classes and demands (opara-bench profile --model M --out P records a full one)",
                    options.profile));
  }
  const Profile profile = profile_from_json(text.str(), options.profile);
  std::vector<NodeShapes> shapes;
  if (!examples.empty()) {
    std::vector<c10::IValue> cpu_inputs;
    for (const at::Tensor& example : examples) cpu_inputs.emplace_back(example.cpu());
    shapes = record_shapes(graph, cpu_inputs);
  }
  return placement_costs(graph, profile, shapes, options.alpha_us);
}

}  // namespace

OverflowChoice choose_placement(const Graph& graph, const std::vector<at::Tensor>& examples, const Options& options,
                                int gpu_streams) {
  OverflowChoice choice;
  switch (options.overflow) {
    case OverflowPolicy::kNone: choice.placement = gpu_placement(graph); break;
    case OverflowPolicy::kManual: choice.placement = manual_choice(graph, options.cpu_nodes); break;
    case OverflowPolicy::kCommSd: {
      const PlacementCosts costs = profile_placement_costs(graph, examples, options);
      CommSdOptions comm_sd;
      comm_sd.gpu_streams = std::max(1, gpu_streams);
      const PlacementReport report = comm_sd_placement(graph, costs, comm_sd);
      choice.placement = report.placement;
      choice.predicted_none_us = report.none_us;
      choice.predicted_us = report.chosen_us;
      break;
    }
  }
  return choice;
}

}  // namespace opara
