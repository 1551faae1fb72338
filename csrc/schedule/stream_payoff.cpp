// Streams that cannot pay for their events. Each event pair (a record on one stream, a wait on
// another) costs the device about as much as a short kernel; a stream whose whole work is less
// than the events that fork it and join it back runs slower apart than inline. Such a stream is
// merged into the stream it was forked from, before the cap, so that the cap spends its streams
// on work that pays (issue 45: "no stream that cannot pay").
#include <fmt/format.h>

#include <algorithm>

#include "graph/alias_classes.h"
#include "opara/error.h"
#include "schedule/stages.h"

namespace opara {

int merge_unpaying_streams(const KernelDag& dag, StreamAssignment& streams, const std::vector<NodeId>& order,
                           const std::vector<NodeCost>& costs, const StreamPayoff& payoff) {
  if (payoff.event_pair <= 0 || streams.stream_count <= 1) return 0;
  if (!costs.empty() && costs.size() != streams.stream_of.size()) {
    throw Error(fmt::format("{} node costs given for a graph of {} nodes", costs.size(), streams.stream_of.size()));
  }
  // Each stream's nodes in launch order; streams in the order of their first launch.
  std::vector<std::vector<NodeId>> members(static_cast<std::size_t>(streams.stream_count));
  std::vector<int> by_first_launch;
  for (NodeId node : order) {
    const int stream = streams.stream_of[node];
    if (stream == kNoStream) continue;
    if (members[stream].empty()) by_first_launch.push_back(stream);
    members[stream].push_back(node);
  }
  const auto cost = [&](NodeId node) {
    return std::max(costs.empty() ? 0.0 : costs[node].demand, payoff.kernel_floor);
  };
  // A union-find over streams: where each stream's nodes run now.
  AliasClasses groups(static_cast<std::size_t>(streams.stream_count));
  int merged = 0;
  for (const int stream : by_first_launch) {
    const std::vector<NodeId>& nodes = members[stream];
    double work = 0;
    std::size_t crossings = 0;  // dependencies between its nodes and another stream's
    for (NodeId node : nodes) {
      work += cost(node);
      for (const auto* neighbours : {&dag.predecessors[node], &dag.successors[node]}) {
        for (NodeId other : *neighbours) crossings += groups.find(streams.stream_of[other]) != groups.find(stream);
      }
    }
    if (crossings == 0 || work >= payoff.event_pair * static_cast<double>(crossings)) continue;
    // The stream it was forked from: its first node's first predecessor's (the kernel DAG's are
    // kernel nodes); else the one its last node hands on to.
    const std::vector<NodeId>& before = dag.predecessors[nodes.front()];
    const std::vector<NodeId>& after = dag.successors[nodes.back()];
    if (before.empty() && after.empty()) continue;
    const int into = groups.find(streams.stream_of[before.empty() ? after.front() : before.front()]);
    if (into == groups.find(stream)) continue;
    groups.join(stream, into);
    ++merged;
  }
  if (merged == 0) return 0;
  // Renumber what is left by first launch.
  std::vector<int> number(static_cast<std::size_t>(streams.stream_count), -1);
  int count = 0;
  for (const int stream : by_first_launch) {
    const int group = groups.find(stream);
    if (number[group] < 0) number[group] = count++;
  }
  for (int& stream : streams.stream_of) {
    if (stream != kNoStream) stream = number[groups.find(stream)];
  }
  streams.stream_count = count;
  return merged;
}

}  // namespace opara
