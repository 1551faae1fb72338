// Stream allocation under each policy, and the public entry points of the stages.
#include "schedule/stages.h"
#include "support/internal_assert.h"

namespace opara {

StreamAssignment allocate_streams(const Graph& graph, const KernelDag& dag, StreamPolicy policy,
                                  const std::vector<NodeId>& order, int max_streams) {
  switch (policy) {
    case StreamPolicy::kTrtllm: return trtllm_streams(graph, dag, order, max_streams);
    case StreamPolicy::kTorchsched: return torchsched_streams(dag, order, max_streams);
    case StreamPolicy::kOpara: return opara_streams(dag, order, /*unhanded_rule=*/false);
    case StreamPolicy::kOparaUnhanded: return opara_streams(dag, order, /*unhanded_rule=*/true);
    case StreamPolicy::kNimble: return nimble_streams(dag, order);
    case StreamPolicy::kSingle: {
      StreamAssignment result;
      result.stream_of.assign(dag.launches_kernel.size(), kNoStream);
      for (NodeId id = 0; id < static_cast<NodeId>(dag.launches_kernel.size()); ++id) {
        if (dag.is_kernel(id)) result.stream_of[id] = 0;
      }
      result.stream_count = dag.kernel_count > 0 ? 1 : 0;
      return result;
    }
  }
  OPARA_UNREACHABLE("unknown stream policy {}", static_cast<int>(policy));
}

StreamAssignment numbered_by_first_launch(const KernelDag& dag, const std::vector<int>& streams,
                                          const std::vector<NodeId>& order) {
  StreamAssignment result;
  result.stream_of.assign(dag.launches_kernel.size(), kNoStream);
  std::vector<int> renumbered;
  for (NodeId id : order) {
    if (!dag.is_kernel(id)) continue;
    const auto stream = static_cast<std::size_t>(streams[id]);
    if (stream >= renumbered.size()) renumbered.resize(stream + 1, kNoStream);
    if (renumbered[stream] == kNoStream) renumbered[stream] = result.stream_count++;
    result.stream_of[id] = renumbered[stream];
  }
  return result;
}

std::optional<StreamAssignment> planned_streams(const Graph& graph, const KernelDag& dag,
                                                const std::vector<NodeId>& order) {
  std::vector<int> planned(graph.size(), kNoStream);
  for (const Node& node : graph.nodes()) {
    if (!dag.is_kernel(node.id)) continue;
    if (node.planned_stream < 0) return std::nullopt;
    planned[node.id] = node.planned_stream;
  }
  StreamAssignment result = numbered_by_first_launch(dag, planned, order);
  if (result.stream_count == 0) return std::nullopt;
  return result;
}

StreamAssignment allocate_streams(const Graph& graph, StreamPolicy policy, const std::vector<NodeId>& order,
                                  int max_streams) {
  return allocate_streams(graph, kernel_dag(graph), policy, order, max_streams);
}

void cap_streams(const Graph& graph, StreamAssignment& streams, int max_streams, const std::vector<NodeId>& order,
                 const std::vector<NodeCost>& costs) {
  cap_streams(graph, kernel_dag(graph), streams, max_streams, order, costs);
}

int merge_unpaying_streams(const Graph& graph, StreamAssignment& streams, const std::vector<NodeId>& order,
                           const std::vector<NodeCost>& costs, const StreamPayoff& payoff) {
  return merge_unpaying_streams(kernel_dag(graph), streams, order, costs, payoff);
}

EventPlan plan_events(const Graph& graph, const std::vector<int>& stream_of, const std::vector<NodeId>& order) {
  return plan_events(kernel_dag(graph), stream_of, order);
}

}  // namespace opara
