// make_plan() and the Plan's own queries.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <utility>

#include "opara/error.h"
#include "opara/plan.h"
#include "schedule/regions.h"
#include "schedule/stages.h"

namespace opara {
namespace {

constexpr std::array<std::pair<StreamPolicy, std::string_view>, 6> kStreamPolicies = {{
    {StreamPolicy::kOpara, "opara"},
    {StreamPolicy::kOparaUnhanded, "opara-unhanded"},
    {StreamPolicy::kNimble, "nimble"},
    {StreamPolicy::kSingle, "single"},
    {StreamPolicy::kTrtllm, "trtllm"},
    {StreamPolicy::kTorchsched, "torchsched"},
}};
constexpr std::array<std::pair<OrderPolicy, std::string_view>, 3> kOrderPolicies = {{
    {OrderPolicy::kTopological, "topological"},
    {OrderPolicy::kOpara, "opara"},
    {OrderPolicy::kTrtllm, "trtllm"},
}};

template <typename Policy, std::size_t N>
std::string_view name_of(const std::array<std::pair<Policy, std::string_view>, N>& table, Policy policy) {
  for (const auto& [value, name] : table) {
    if (value == policy) return name;
  }
  return "unknown";
}

template <typename Policy, std::size_t N>
Policy parse(const std::array<std::pair<Policy, std::string_view>, N>& table, std::string_view text,
             std::string_view what) {
  std::vector<std::string_view> names;
  for (const auto& [value, name] : table) {
    if (name == text) return value;
    names.push_back(name);
  }
  throw Error(fmt::format("unknown {} '{}'; expected one of: {}", what, text, fmt::join(names, ", ")));
}

}  // namespace

std::string_view to_string(StreamPolicy policy) {
  return name_of(kStreamPolicies, policy);
}
std::string_view to_string(OrderPolicy policy) {
  return name_of(kOrderPolicies, policy);
}
std::string_view to_string(OpClass op_class) {
  return op_class == OpClass::kCompute ? "compute" : "memory";
}
StreamPolicy parse_stream_policy(std::string_view text) {
  return parse(kStreamPolicies, text, "stream allocator");
}
OrderPolicy parse_order_policy(std::string_view text) {
  return parse(kOrderPolicies, text, "launch order");
}

std::size_t Plan::wait_count() const {
  std::size_t count = 0;
  for (const auto& node_waits : waits) count += node_waits.size();
  return count;
}

std::size_t Plan::event_count() const {
  std::size_t count = 0;
  for (std::uint8_t recorded : records) count += recorded;
  return count;
}

std::vector<std::vector<NodeId>> Plan::stream_nodes() const {
  std::vector<std::vector<NodeId>> nodes(static_cast<std::size_t>(std::max(stream_count, 0)));
  for (NodeId node : launch_order) {
    const int stream = stream_of.at(node);
    if (stream != kNoStream) nodes.at(stream).push_back(node);
  }
  return nodes;
}

bool Plan::operator==(const Plan& other) const {
  return stream_policy == other.stream_policy && order_policy == other.order_policy &&
         max_streams == other.max_streams && cost_source == other.cost_source && stream_count == other.stream_count &&
         stream_of == other.stream_of && launch_order == other.launch_order && waits == other.waits &&
         records == other.records && events_unreduced == other.events_unreduced && region_of == other.region_of &&
         region_count == other.region_count;
}

Plan make_plan(const Graph& graph, const PlanOptions& options, const std::vector<NodeCost>& costs) {
  if (options.max_streams < 0)
    throw Error(fmt::format("max streams must be 0 (no cap) or more, not {}", options.max_streams));
  const KernelDag dag = kernel_dag(graph);
  Plan plan;
  plan.stream_policy = options.streams;
  plan.order_policy = options.order;
  plan.max_streams = options.max_streams;
  plan.cost_source = costs.empty() ? "none" : "given";
  plan.launch_order = launch_order(graph, options.order, costs);
  // A graph whose nodes carry a plan's streams (Inductor's regions as nodes) keeps them: one plan.
  std::optional<StreamAssignment> planned = planned_streams(graph, dag, plan.launch_order);
  const bool kept_planned = planned.has_value();
  StreamAssignment streams =
      planned ? *std::move(planned)
              : allocate_streams(graph, dag, options.streams, plan.launch_order, options.max_streams);
  // The payoff is opara's: a peer's policy keeps the streams its authors' code opens.
  const bool peer = options.streams == StreamPolicy::kTrtllm || options.streams == StreamPolicy::kTorchsched;
  if (!kept_planned && !peer) merge_unpaying_streams(dag, streams, plan.launch_order, costs, options.payoff);
  const int uncapped_streams = streams.stream_count;
  cap_streams(graph, dag, streams, options.max_streams, plan.launch_order, costs);
  if (streams.stream_count < uncapped_streams) {
    plan.launch_order = list_scheduled_order(graph, streams.stream_of, streams.stream_count, plan.launch_order, costs);
    streams = numbered_by_first_launch(dag, streams.stream_of, plan.launch_order);
  }
  plan.stream_count = streams.stream_count;
  plan.stream_of = std::move(streams.stream_of);
  if (options.regions) {
    if (!(options.region_min_share >= 0))
      throw Error(fmt::format("region min share must be 0 or more, not {}", options.region_min_share));
    form_regions(graph, dag, costs, options.region_min_share, plan);
  }
  EventPlan events = plan_events(dag, plan.stream_of, plan.launch_order);
  plan.waits = std::move(events.waits);
  plan.records = std::move(events.records);
  plan.events_unreduced = events.unreduced;
#ifndef NDEBUG
  require_valid(graph, plan);  // debug builds prove every plan they make
#endif
  return plan;
}

}  // namespace opara
