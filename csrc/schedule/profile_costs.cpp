// Costs from a recorded profile: the demands the GPU itself reported for each node.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "opara/costs.h"
#include "opara/error.h"

namespace opara {

std::vector<NodeCost> costs_from_profile(const Graph& graph, const std::string& path) {
  std::ifstream file(path);
  if (!file) throw Error(fmt::format("{}: cannot open the profile", path));
  std::vector<NodeCost> costs(graph.size());
  std::vector<bool> seen(graph.size(), false);
  try {
    const auto json = nlohmann::json::parse(file);
    for (const auto& entry : json.at("nodes")) {
      const auto id = entry.at("id").get<NodeId>();
      if (id < 0 || id >= static_cast<NodeId>(graph.size())) {
        throw Error(fmt::format("{}: node {} does not exist in {} ({} nodes): the profile is of another model", path,
                                id, graph.source_path, graph.size()));
      }
      const auto kind = entry.at("kind").get<std::string>();
      if (kind != graph.node(id).kind) {
        throw Error(fmt::format("{}: node {} is {} in the profile but {} in {}: profile this model again", path, id,
                                kind, graph.describe(id), graph.source_path));
      }
      const auto op_class = entry.at("class").get<std::string>();
      if (op_class != "compute" && op_class != "memory") {
        throw Error(fmt::format("{}: node {} has class '{}'; expected compute or memory", path, id, op_class));
      }
      costs[id] =
          NodeCost{op_class == "compute" ? OpClass::kCompute : OpClass::kMemory, entry.at("demand").get<double>()};
      seen[id] = true;
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {
    throw Error(fmt::format("{}: not a valid profile: {}", path, error.what()));
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
