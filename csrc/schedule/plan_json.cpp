// The Plan as JSON, for `opara-bench plan --json`, storing and diffing plans.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "opara/error.h"
#include "opara/plan.h"

namespace opara {

std::string to_json(const Plan& plan) {
  nlohmann::json waits = nlohmann::json::object();
  std::vector<NodeId> recorded;
  for (std::size_t node = 0; node < plan.waits.size(); ++node) {
    if (!plan.waits[node].empty()) waits[std::to_string(node)] = plan.waits[node];
    if (node < plan.records.size() && plan.records[node]) recorded.push_back(static_cast<NodeId>(node));
  }
  const nlohmann::json json = {
      {"format", "opara-plan"},
      {"version", 1},
      {"stream_policy", to_string(plan.stream_policy)},
      {"order_policy", to_string(plan.order_policy)},
      {"max_streams", plan.max_streams},
      {"cost_source", plan.cost_source},
      {"nodes", plan.stream_of.size()},
      {"streams", plan.stream_count},
      {"events", plan.wait_count()},
      {"events_unreduced", plan.events_unreduced},
      {"events_recorded", recorded.size()},
      {"stream_of", plan.stream_of},
      {"launch_order", plan.launch_order},
      {"waits", waits},
      {"records", recorded},
  };
  if (!plan.region_of.empty()) {
    nlohmann::json with_regions = json;
    with_regions["regions"] = plan.region_count;
    with_regions["region_of"] = plan.region_of;
    return with_regions.dump();
  }
  return json.dump();
}

std::string to_json(const Graph& graph, const Plan& plan) {
  nlohmann::json json = nlohmann::json::parse(to_json(plan));
  std::vector<std::string> kinds;
  std::vector<std::string> sources;
  std::vector<std::vector<std::string>> outputs;
  std::vector<std::string> writes;  // the value each node writes in place ("": none)
  for (const Node& node : graph.nodes()) {
    kinds.push_back(node.kind);
    sources.push_back(node.source);
    writes.push_back(node.has(kWritesInput) && !node.inputs.empty() ? graph.value(node.inputs.front()).name : "");
    outputs.emplace_back();
    for (ValueId value : node.outputs) outputs.back().push_back(graph.value(value).name);
  }
  json["kinds"] = kinds;
  json["sources"] = sources;
  json["outputs"] = outputs;
  json["writes"] = writes;
  return json.dump();
}

Plan plan_from_json(std::string_view text) {
  try {
    const auto json = nlohmann::json::parse(text);
    if (json.value("format", "") != "opara-plan") throw Error("not an opara plan (no \"format\": \"opara-plan\")");
    if (json.at("version").get<int>() != 1) {
      throw Error(
          fmt::format("plan version {} is not supported; this build reads version 1", json.at("version").dump()));
    }
    Plan plan;
    plan.stream_policy = parse_stream_policy(json.at("stream_policy").get<std::string>());
    plan.order_policy = parse_order_policy(json.at("order_policy").get<std::string>());
    plan.max_streams = json.at("max_streams").get<int>();
    plan.cost_source = json.at("cost_source").get<std::string>();
    plan.stream_count = json.at("streams").get<int>();
    plan.stream_of = json.at("stream_of").get<std::vector<int>>();
    plan.launch_order = json.at("launch_order").get<std::vector<NodeId>>();
    plan.events_unreduced = json.at("events_unreduced").get<std::size_t>();
    const std::size_t count = plan.stream_of.size();
    if (json.at("nodes").get<std::size_t>() != count) {
      throw Error(fmt::format("\"nodes\" says {} but \"stream_of\" has {} entries", json.at("nodes").dump(), count));
    }
    auto node_id = [count](long long id) {
      if (id < 0 || static_cast<std::size_t>(id) >= count) throw Error(fmt::format("node {} is out of range", id));
      return static_cast<NodeId>(id);
    };
    plan.waits.resize(count);
    for (const auto& [node, events] : json.at("waits").items()) {
      for (long long from : events.get<std::vector<long long>>())
        plan.waits[node_id(std::stoll(node))].push_back(node_id(from));
    }
    plan.records.assign(count, 0);
    for (long long node : json.at("records").get<std::vector<long long>>()) plan.records[node_id(node)] = 1;
    if (json.contains("region_of")) {
      plan.region_count = json.at("regions").get<int>();
      plan.region_of = json.at("region_of").get<std::vector<int>>();
      if (plan.region_of.size() != count) {
        throw Error(fmt::format("\"region_of\" has {} entries for {} nodes", plan.region_of.size(), count));
      }
    }
    return plan;
  } catch (const Error& error) {
    throw Error(fmt::format("invalid plan JSON: {}", error.what()));
  } catch (const std::exception& error) {
    throw Error(fmt::format("invalid plan JSON: {}", error.what()));
  }
}

}  // namespace opara
