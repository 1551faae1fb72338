// Stream allocation under each policy, and the public entry points of the stages.
#include "schedule/stages.h"
#include "support/internal_assert.h"

namespace opara {

StreamAssignment allocate_streams(const Graph& graph, const KernelDag& dag, StreamPolicy policy,
                                  const std::vector<NodeId>& order, int max_streams) {
  switch (policy) {
    case StreamPolicy::kTrtllm: return trtllm_streams(graph, dag, max_streams);
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

std::optional<StreamAssignment> planned_streams(const Graph& graph, const KernelDag& dag,
                                                const std::vector<NodeId>& order) {
  StreamAssignment result;
  result.stream_of.assign(graph.size(), kNoStream);
  std::vector<int> renamed;
  for (NodeId id : order) {
    if (!dag.is_kernel(id)) continue;
    const int planned = graph.node(id).planned_stream;
    if (planned < 0) return std::nullopt;
    if (static_cast<std::size_t>(planned) >= renamed.size()) renamed.resize(planned + 1, kNoStream);
    if (renamed[planned] == kNoStream) renamed[planned] = result.stream_count++;
    result.stream_of[id] = renamed[planned];
  }
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
