// Fitting a stream assignment under a cap. Streams are taken by the launch position of their
// first node and placed on the kept streams greedily:
//   1. onto a kept stream whose last node reaches this stream's first node: the two were totally
//      ordered already, so the merge costs no parallelism (the tightest such fit is chosen);
//   2. onto a new kept stream, while under the cap;
//   3. onto the kept stream where this stream's first node could start soonest, in a simulation of
//      the launch order on the kept streams with each node taking its cost (its demand; 1 without
//      costs), ties to the least busy. "Fewest nodes", the rule before this one, put branchy's
//      cheap sigmoid behind a chain of four convolutions that the other stream then waited for:
//      capped at two streams, the CPU ran it as slowly as one stream.
// Streams in a merged group still run in launch order, which is topological, so no merge can
// break a dependency or deadlock; the events are planned afterwards on the merged streams.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "graph/reachability.h"
#include "opara/error.h"
#include "schedule/stages.h"

namespace opara {
namespace {

// Above this many nodes the n^2 reachability bitsets cost too much memory (32 MB at 16k); only
// direct edges count as "reaches" then, which can only make merges more conservative.
constexpr std::size_t kReachabilityLimit = 16384;

struct StreamSpan {
  int stream = 0;
  NodeId first = kNoNode;
  NodeId last = kNoNode;
};

// A kept stream of the simulation.
struct KeptStream {
  NodeId last = kNoNode;  // the latest node (launch order) of the streams merged into it
  double free_at = 0;     // when its latest simulated node finishes
  double busy = 0;        // the cost of the nodes simulated on it
};

}  // namespace

void cap_streams(const Graph& graph, const KernelDag& dag, StreamAssignment& streams, int max_streams,
                 const std::vector<NodeId>& order, const std::vector<NodeCost>& costs) {
  if (!costs.empty() && costs.size() != graph.size()) {
    throw Error(
        fmt::format("{}: {} node costs given for a graph of {} nodes", graph.source_path, costs.size(), graph.size()));
  }
  if (max_streams <= 0 || streams.stream_count <= max_streams) return;
  std::vector<StreamSpan> spans(static_cast<std::size_t>(streams.stream_count));
  for (NodeId node : order) {
    const int stream = streams.stream_of[node];
    if (stream == kNoStream) continue;
    StreamSpan& span = spans[stream];
    span.stream = stream;
    if (span.first == kNoNode) span.first = node;
    span.last = node;
  }
  const std::vector<std::int32_t> position = positions_in(order, graph.size());

  std::unique_ptr<Reachability> reachability;
  if (graph.size() <= kReachabilityLimit) reachability = std::make_unique<Reachability>(graph);
  auto reaches = [&](NodeId from, NodeId to) {
    if (reachability) return reachability->reaches(from, to);
    const auto& predecessors = dag.predecessors[to];
    return std::find(predecessors.begin(), predecessors.end(), from) != predecessors.end();
  };
  auto cost = [&costs](NodeId node) { return costs.empty() ? 1.0 : std::max(costs[node].demand, 0.0); };

  std::vector<KeptStream> kept;
  std::vector<int> kept_of(spans.size(), -1);  // by original stream
  std::vector<double> finish(graph.size(), 0.0);
  for (NodeId node : order) {
    const int stream = streams.stream_of[node];
    if (stream == kNoStream) continue;
    double ready = 0;
    for (NodeId predecessor : dag.predecessors[node]) ready = std::max(ready, finish[predecessor]);
    if (kept_of[stream] < 0) {  // the stream's first node: choose where the stream goes
      const StreamSpan& span = spans[stream];
      std::optional<std::size_t> target;
      for (std::size_t k = 0; k < kept.size(); ++k) {
        const bool ordered = position[kept[k].last] < position[span.first] && reaches(kept[k].last, span.first);
        if (ordered && (!target || position[kept[k].last] > position[kept[*target].last])) target = k;
      }
      if (!target && kept.size() < static_cast<std::size_t>(max_streams)) {
        target = kept.size();
        kept.push_back(KeptStream{});
      }
      if (!target) {
        auto start_on = [ready](const KeptStream& k) { return std::max(k.free_at, ready); };
        target = static_cast<std::size_t>(std::min_element(kept.begin(), kept.end(),
                                                           [&](const KeptStream& a, const KeptStream& b) {
                                                             return start_on(a) != start_on(b)
                                                                        ? start_on(a) < start_on(b)
                                                                        : a.busy < b.busy;
                                                           }) -
                                          kept.begin());
      }
      KeptStream& into = kept[*target];
      if (into.last == kNoNode || position[span.last] > position[into.last]) into.last = span.last;
      kept_of[stream] = static_cast<int>(*target);
    }
    KeptStream& on = kept[static_cast<std::size_t>(kept_of[stream])];
    finish[node] = std::max(on.free_at, ready) + cost(node);
    on.free_at = finish[node];
    on.busy += cost(node);
  }
  for (int& stream : streams.stream_of) {
    if (stream != kNoStream) stream = kept_of[stream];
  }
  streams.stream_count = static_cast<int>(kept.size());
}

}  // namespace opara
