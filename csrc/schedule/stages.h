#pragma once

// The stages make_plan() chains, for tests, benchmarks and custom pipelines, and the same stages
// on a prepared KernelDag, so that make_plan() builds it once.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "opara/graph.h"
#include "opara/plan.h"
#include "schedule/kernel_dag.h"

namespace opara {

// Launch order under `policy`; `costs` as for make_plan().
std::vector<NodeId> launch_order(const Graph& graph, OrderPolicy policy, const std::vector<NodeCost>& costs = {});

struct StreamAssignment {
  std::vector<int> stream_of;  // by node id; kNoStream for nodes that launch no kernel
  int stream_count = 0;
};

// Streams under `policy`, visiting nodes in `order` (a topological order; Opara's rules depend on
// it, the others' do not). The peers' policies open at most `max_streams` (0: their default).
StreamAssignment allocate_streams(const Graph& graph, StreamPolicy policy, const std::vector<NodeId>& order,
                                  int max_streams = 0);

// Merges streams until at most `max_streams` remain: a stream joins one whose nodes all come before
// its own (no parallelism lost) when there is one, otherwise the one where it could start soonest
// in a simulation of `order` with each node taking its cost (by node, its demand; empty: 1 each).
// Any merge is safe: one stream runs its nodes in launch order, which is topological.
void cap_streams(const Graph& graph, StreamAssignment& streams, int max_streams, const std::vector<NodeId>& order,
                 const std::vector<NodeCost>& costs = {});

// Merges each stream whose work cannot pay for its events (StreamPayoff) into the stream of its
// first node's first kernel predecessor, the one it was forked from (a stream without one: into
// the stream of its last node's first successor), taking streams by first launch; the streams
// left are renumbered by first launch. Returns how many were merged. Any merge is safe: one stream
// runs its nodes in launch order, which is topological.
int merge_unpaying_streams(const Graph& graph, StreamAssignment& streams, const std::vector<NodeId>& order,
                           const std::vector<NodeCost>& costs, const StreamPayoff& payoff);

// The launch order in which a list schedule of `stream_of`'s streams starts the nodes: each
// stream, when idle, starts its ready node with the longest path of costs to the graph's end
// (`order`'s first among equals); a kernel node takes its cost (its demand; empty costs: 1 each),
// a node without a stream none. Topological; make_plan orders a plan the cap merged this way
// (capped_order.cpp says why).
std::vector<NodeId> list_scheduled_order(const Graph& graph, const std::vector<int>& stream_of, int stream_count,
                                         const std::vector<NodeId>& order, const std::vector<NodeCost>& costs);

struct EventPlan {
  std::vector<std::vector<NodeId>> waits;  // by node id
  std::vector<std::uint8_t> records;       // by node id
  std::size_t unreduced = 0;               // cross-stream dependencies before reduction
};

// One wait per cross-stream dependency between kernel nodes, then only those that same-stream
// order and the other waits do not already imply.
EventPlan plan_events(const Graph& graph, const std::vector<int>& stream_of, const std::vector<NodeId>& order);

// `streams` (by node id, any numbers; read for kernel nodes) numbered 0, 1, ... as they are first
// launched in `order`, as every policy numbers its streams; the streams no kernel node uses vanish.
StreamAssignment numbered_by_first_launch(const KernelDag& dag, const std::vector<int>& streams,
                                          const std::vector<NodeId>& order);

// The streams the graph's nodes were given already (Node::planned_stream), numbered by first
// launch in `order`; nullopt unless every kernel node has one.
std::optional<StreamAssignment> planned_streams(const Graph& graph, const KernelDag& dag,
                                                const std::vector<NodeId>& order);

StreamAssignment opara_streams(const KernelDag& dag, const std::vector<NodeId>& order, bool unhanded_rule);
// Nimble's first step alone (a minimum path cover of the transitive reduction, one chain a
// "stream"), exported for its tests; nimble_streams covers these chains again.
StreamAssignment nimble_chains(const KernelDag& dag, const std::vector<NodeId>& order);
StreamAssignment nimble_streams(const KernelDag& dag, const std::vector<NodeId>& order);
// The peers' (trtllm_streams.cpp, torchsched_streams.cpp), each at most `max_streams` streams (0:
// its own default, 3 and 8), and TensorRT-LLM's launch order (the order its list schedule takes
// the nodes in).
StreamAssignment trtllm_streams(const Graph& graph, const KernelDag& dag, const std::vector<NodeId>& order,
                                int max_streams);
std::vector<NodeId> trtllm_order(const Graph& graph);
StreamAssignment torchsched_streams(const KernelDag& dag, const std::vector<NodeId>& order, int max_streams);
StreamAssignment allocate_streams(const Graph& graph, const KernelDag& dag, StreamPolicy policy,
                                  const std::vector<NodeId>& order, int max_streams);
void cap_streams(const Graph& graph, const KernelDag& dag, StreamAssignment& streams, int max_streams,
                 const std::vector<NodeId>& order, const std::vector<NodeCost>& costs);
int merge_unpaying_streams(const KernelDag& dag, StreamAssignment& streams, const std::vector<NodeId>& order,
                           const std::vector<NodeCost>& costs, const StreamPayoff& payoff);
EventPlan plan_events(const KernelDag& dag, const std::vector<int>& stream_of, const std::vector<NodeId>& order);

}  // namespace opara
