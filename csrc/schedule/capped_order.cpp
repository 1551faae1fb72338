// The launch order of a capped plan: a list schedule of the capped streams.
//
// A stream runs its nodes in launch order. The order policies order nodes for many streams; once
// the cap has merged them into a few, that order can hold a stream on one branch while work that
// another stream waits for sits behind it. multihead_rnn at two streams: opara's order launches its
// eight LSTM heads one after another, the cap gives a head's per-step input projections to the
// other stream, which reaches them only after its own head, so the two streams take turns (0.8x
// eager on the CPU where TensorRT-LLM's list schedule runs 1.4x). Simulated instead: each stream,
// when idle, starts the ready node of its own with the longest path to the graph's end (the
// order's first among equals), so a projection another stream's head waits for goes before the
// rest of its own head; a node takes its cost (1 without costs), kernel-free nodes none. The
// launch order is the order the simulation starts nodes in: topological, since a node starts only
// after its predecessors finished.
#include <algorithm>
#include <functional>
#include <queue>
#include <tuple>

#include "graph/graph_analysis.h"
#include "schedule/stages.h"

namespace opara {

std::vector<NodeId> list_scheduled_order(const Graph& graph, const std::vector<int>& stream_of, int stream_count,
                                         const std::vector<NodeId>& order, const std::vector<NodeCost>& costs) {
  const std::size_t count = graph.size();
  const std::vector<std::int32_t> position = positions_in(order, count);
  std::vector<double> cost(count, 0.0);  // kernel-free nodes take none
  for (NodeId node = 0; node < static_cast<NodeId>(count); ++node) {
    if (stream_of[node] != kNoStream) cost[node] = costs.empty() ? 1.0 : std::max(costs[node].demand, 0.0);
  }
  const std::vector<double> remaining = remaining_path_lengths(graph, cost);
  using Priority = std::tuple<double, std::int32_t>;  // minus the remaining path, position
  using Ready = std::priority_queue<Priority, std::vector<Priority>, std::greater<>>;
  std::vector<Ready> ready(static_cast<std::size_t>(stream_count));
  std::vector<std::uint8_t> busy(static_cast<std::size_t>(stream_count), 0);
  using Finish = std::tuple<double, std::int32_t>;  // time, position of the node
  std::priority_queue<Finish, std::vector<Finish>, std::greater<>> running;
  std::vector<std::size_t> waiting(count);
  std::vector<NodeId> launched;
  launched.reserve(count);
  std::vector<NodeId> released;  // nodes whose predecessors have all finished, not yet queued

  auto finished = [&](NodeId node) {
    for (NodeId user : graph.node(node).successors) {
      if (--waiting[user] == 0) released.push_back(user);
    }
  };
  // A kernel-free node starts and finishes when it is ready, releasing its users at once.
  auto release = [&] {
    while (!released.empty()) {
      const NodeId node = released.back();
      released.pop_back();
      const int stream = stream_of[node];
      if (stream != kNoStream) {
        ready[static_cast<std::size_t>(stream)].emplace(-remaining[node], position[node]);
        continue;
      }
      launched.push_back(node);
      finished(node);
    }
  };
  for (NodeId node : order) {
    waiting[node] = graph.node(node).predecessors.size();
    if (waiting[node] == 0) released.push_back(node);
  }
  double now = 0;
  release();
  while (launched.size() < count) {
    for (std::size_t stream = 0; stream < ready.size(); ++stream) {
      if (busy[stream] || ready[stream].empty()) continue;
      const NodeId node = order[static_cast<std::size_t>(std::get<1>(ready[stream].top()))];
      ready[stream].pop();
      busy[stream] = 1;
      launched.push_back(node);
      running.emplace(now + cost[node], position[node]);
    }
    if (running.empty()) break;  // nothing left can start: a cycle, which validation reports
    const auto [finish, finished_position] = running.top();
    running.pop();
    now = finish;
    const NodeId node = order[static_cast<std::size_t>(finished_position)];
    busy[static_cast<std::size_t>(stream_of[node])] = 0;
    finished(node);
    release();
  }
  return launched;
}

}  // namespace opara
