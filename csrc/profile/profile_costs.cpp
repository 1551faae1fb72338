// Costs from a recorded profile: the demands the GPU itself reported for each node.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "opara/error.h"
#include "opara/plan.h"
#include "opara/profile.h"

namespace opara {
namespace {

struct Entry {
  NodeId id;
  std::string kind;
  OpClass op_class;
  double demand;
};

// The minimal form: {"nodes": [{"id", "kind", "class", "demand"}]}.
std::vector<Entry> minimal_entries(const std::string& text, const std::string& path) {
  std::vector<Entry> entries;
  try {
    const auto json = nlohmann::json::parse(text);
    for (const auto& entry : json.at("nodes")) {
      const auto id = entry.at("id").get<NodeId>();
      const auto op_class = entry.at("class").get<std::string>();
      if (op_class != "compute" && op_class != "memory") {
        throw Error(fmt::format("{}: node {} has class '{}'; expected compute or memory", path, id, op_class));
      }
      entries.push_back(Entry{id, entry.at("kind").get<std::string>(),
                              op_class == "compute" ? OpClass::kCompute : OpClass::kMemory,
                              entry.at("demand").get<double>()});
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {
    throw Error(fmt::format("{}: not a valid profile: {}", path, error.what()));
  }
  return entries;
}

std::vector<Entry> full_entries(const std::string& text, const std::string& path, const ProfileMatch& match) {
  const Profile profile = profile_from_json(text, path);
  require_profile_matches(profile, match, path);
  std::vector<Entry> entries;
  for (const NodeProfile& node : profile.nodes) {
    entries.push_back(Entry{node.id, node.kind, node.op_class, node.demand.demand});
  }
  return entries;
}

}  // namespace

std::vector<NodeCost> costs_from_profile(const Graph& graph, const std::string& path, const ProfileMatch& match) {
  std::ifstream file(path);
  if (!file) throw Error(fmt::format("{}: cannot open the profile", path));
  std::stringstream text;
  text << file.rdbuf();
  const std::vector<Entry> entries =
      is_full_profile(text.str()) ? full_entries(text.str(), path, match) : minimal_entries(text.str(), path);

  std::vector<NodeCost> costs(graph.size());
  std::vector<bool> seen(graph.size(), false);
  for (const Entry& entry : entries) {
    if (entry.id < 0 || entry.id >= static_cast<NodeId>(graph.size())) {
      throw Error(fmt::format("{}: node {} does not exist in {} ({} nodes): the profile is of another model", path,
                              entry.id, graph.source_path, graph.size()));
    }
    if (entry.kind != graph.node(entry.id).kind) {
      throw Error(fmt::format("{}: node {} is {} in the profile but {} in {}: profile this model again", path, entry.id,
                              entry.kind, graph.describe(entry.id), graph.source_path));
    }
    costs[entry.id] = NodeCost{entry.op_class, entry.demand};
    seen[entry.id] = true;
  }
  for (const Node& node : graph.nodes()) {
    if (node.has(kLaunchesKernel) && !seen[node.id]) {
      throw Error(fmt::format("{}: no entry for {}: the profile is incomplete, profile the model again", path,
                              graph.describe(node.id)));
    }
  }
  return costs;
}

}  // namespace opara
