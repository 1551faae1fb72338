#include "compile/overflow_choice.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "exec/record_shapes.h"
#include "opara/error.h"
#include "opara/profile.h"
#include "overflow/placements.h"

namespace opara {
namespace {

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<Placement> manual_choice(const Graph& graph, const std::vector<std::string>& names) {
  if (names.empty()) {
    throw Error(
        fmt::format("{}: overflow = manual names no node; list node ids or kinds in cpu_nodes "
                    "(Options::overflow.cpu_nodes: \"12\", \"aten::lstm_cell\"), or a .json file {{\"cpu\": [...]}}",
                    graph.source_path));
  }
  if (names.size() == 1 && ends_with(names.front(), ".json")) return manual_placement_file(graph, names.front());
  return manual_placement(graph, names);
}

}  // namespace

PlacementCosts profile_placement_costs(const Graph& graph, const std::vector<at::Tensor>& examples,
                                       const std::string& profile, double alpha_us) {
  std::ifstream file(profile);
  if (!file) throw Error(fmt::format("{}: cannot read the profile; check the path", profile));
  std::stringstream text;
  text << file.rdbuf();
  if (!is_full_profile(text.str())) {
    throw Error(
        fmt::format("{}: Comm+SD needs a full profile with GPU and CPU times; this one holds only classes and "
                    "demands (opara-bench profile --model M --out P records a full one)",
                    profile));
  }
  const Profile loaded = profile_from_json(text.str(), profile);
  std::vector<NodeShapes> shapes;
  if (!examples.empty()) {
    std::vector<c10::IValue> cpu_inputs;
    for (const at::Tensor& example : examples) cpu_inputs.emplace_back(example.cpu());
    try {
      shapes = record_shapes(graph, cpu_inputs);
    } catch (const Error& error) {
      TORCH_WARN("value sizes for Comm+SD from the profile: recording shapes failed (", error.what(), ")");
    }
  }
  return placement_costs(graph, loaded, shapes, alpha_us);
}

OverflowChoice choose_placement(const Graph& graph, const std::vector<at::Tensor>& examples,
                                const OverflowOptions& options, const std::string& profile, int gpu_streams) {
  OverflowChoice choice;
  switch (options.policy) {
    case OverflowPolicy::kNone: choice.placement = gpu_placement(graph); break;
    case OverflowPolicy::kManual: choice.placement = manual_choice(graph, options.cpu_nodes); break;
    case OverflowPolicy::kCommSd: {
      if (profile.empty()) {
        throw Error(
            fmt::format("{}: overflow = comm_sd compares each node's GPU and CPU times, which come from a full "
                        "profile: set profile (Options::costs.profile; opara-bench profile --model M --out P "
                        "records one), or name the CPU nodes with overflow = manual",
                        graph.source_path));
      }
      choice.costs = profile_placement_costs(graph, examples, profile, options.alpha_us);
      choice.comm_sd.gpu_streams = std::max(1, gpu_streams);
      const PlacementReport report = comm_sd_placement(graph, *choice.costs, choice.comm_sd);
      choice.placement = report.placement;
      choice.predicted_none_us = report.none_us;
      choice.predicted_us = report.chosen_us;
      break;
    }
  }
  return choice;
}

}  // namespace opara
