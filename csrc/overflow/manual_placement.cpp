// A placement the user writes: nodes named by id or kind go to the CPU. Every name must match,
// so a typo or a model of another version is an error rather than a silent GPU-only run.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "opara/error.h"
#include "opara/placement.h"
#include "overflow/placements.h"

namespace opara {
namespace {

bool is_id(const std::string& name) {
  return !name.empty() && name.size() < 10 &&
         std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

std::string label(const Graph& graph) {
  return graph.source_path.empty() ? "graph" : graph.source_path;
}

}  // namespace

std::vector<Placement> manual_placement(const Graph& graph, const std::vector<std::string>& names) {
  std::vector<bool> cpu(graph.size(), false);
  std::vector<std::string> unknown;
  for (const std::string& name : names) {
    if (is_id(name)) {
      const long id = std::stol(name);
      if (id >= static_cast<long>(graph.size())) {
        unknown.push_back(name);
      } else {
        cpu[id] = true;
      }
      continue;
    }
    bool found = false;
    for (const Node& node : graph.nodes()) {
      if (node.kind == name) cpu[node.id] = found = true;
    }
    if (!found) unknown.push_back(name);
  }
  if (!unknown.empty()) {
    throw Error(
        fmt::format("{}: no node has the id or kind {} (ids are 0 to {}, kinds are like aten::relu: see "
                    "opara-bench info --model M); fix the CPU node list",
                    label(graph), fmt::join(unknown, ", "), static_cast<long>(graph.size()) - 1));
  }
  return placement_with_cpu_nodes(graph, cpu);
}

std::vector<Placement> manual_placement_file(const Graph& graph, const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  if (!file || !(text << file.rdbuf())) throw Error(fmt::format("{}: cannot read the CPU node list", path));
  const char* form = R"(a JSON object {"cpu": [ids or kinds]}, e.g. {"cpu": [12, "aten::nms"]})";
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& error) {
    throw Error(fmt::format("{}: not JSON ({}); write {}", path, error.what(), form));
  }
  if (!json.is_object() || !json.contains("cpu") || !json["cpu"].is_array()) {
    throw Error(fmt::format("{}: expected {}", path, form));
  }
  std::vector<std::string> names;
  for (const nlohmann::json& entry : json["cpu"]) {
    if (entry.is_number_unsigned() || (entry.is_number_integer() && entry.get<long>() >= 0)) {
      names.push_back(std::to_string(entry.get<long>()));
    } else if (entry.is_string()) {
      names.push_back(entry.get<std::string>());
    } else {
      throw Error(fmt::format("{}: the CPU list holds {}, which is neither a node id nor a kind; expected {}", path,
                              entry.dump(), form));
    }
  }
  try {
    return manual_placement(graph, names);
  } catch (const Error& error) {
    throw Error(fmt::format("{}: {}", path, error.what()));
  }
}

}  // namespace opara
