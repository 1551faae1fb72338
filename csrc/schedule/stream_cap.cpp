// Fitting a stream assignment under a cap. Streams are taken by the launch position of their
// first node and placed on the kept streams greedily:
//   1. onto a kept stream whose last node reaches this stream's first node: the two were totally
//      ordered already, so the merge costs no parallelism (the tightest such fit is chosen);
//   2. onto a new kept stream, while under the cap;
//   3. onto the kept stream with the fewest nodes.
// Streams in a merged group still run in launch order, which is topological, so no merge can
// break a dependency or deadlock; the events are planned afterwards on the merged streams.
#include <algorithm>
#include <memory>
#include <optional>

#include "../graph/reachability.h"
#include "stages.h"

namespace opara {
namespace {

// Above this many nodes the n^2 reachability bitsets cost too much memory (32 MB at 16k); only
// direct edges count as "reaches" then, which can only make merges more conservative.
constexpr std::size_t kReachabilityLimit = 16384;

struct StreamSpan {
  int stream = 0;
  NodeId first = kNoNode;
  NodeId last = kNoNode;
  std::size_t nodes = 0;
};

}  // namespace

void cap_streams(const Graph& graph, const KernelDag& dag, StreamAssignment& streams, int max_streams,
                 const std::vector<NodeId>& order) {
  if (max_streams <= 0 || streams.stream_count <= max_streams) return;
  std::vector<StreamSpan> spans(static_cast<std::size_t>(streams.stream_count));
  for (NodeId node : order) {
    const int stream = streams.stream_of[node];
    if (stream == kNoStream) continue;
    StreamSpan& span = spans[stream];
    span.stream = stream;
    if (span.first == kNoNode) span.first = node;
    span.last = node;
    ++span.nodes;
  }
  const std::vector<std::int32_t> position = positions_in(order, graph.size());
  std::sort(spans.begin(), spans.end(),
            [&](const StreamSpan& a, const StreamSpan& b) { return position[a.first] < position[b.first]; });

  std::unique_ptr<Reachability> reachability;
  if (graph.size() <= kReachabilityLimit) reachability = std::make_unique<Reachability>(graph);
  auto reaches = [&](NodeId from, NodeId to) {
    if (reachability) return reachability->reaches(from, to);
    const auto& predecessors = dag.predecessors[to];
    return std::find(predecessors.begin(), predecessors.end(), from) != predecessors.end();
  };

  std::vector<StreamSpan> kept;  // stream = index in kept; last = its latest node so far
  std::vector<int> kept_of(spans.size(), -1);
  for (const StreamSpan& span : spans) {
    std::optional<std::size_t> target;
    for (std::size_t k = 0; k < kept.size(); ++k) {
      const bool ordered = position[kept[k].last] < position[span.first] && reaches(kept[k].last, span.first);
      if (ordered && (!target || position[kept[k].last] > position[kept[*target].last])) target = k;
    }
    if (!target && kept.size() < static_cast<std::size_t>(max_streams)) {
      target = kept.size();
      kept.push_back(StreamSpan{static_cast<int>(kept.size()), span.first, span.last, 0});
    }
    if (!target) {
      target = static_cast<std::size_t>(
          std::min_element(kept.begin(), kept.end(),
                           [](const StreamSpan& a, const StreamSpan& b) { return a.nodes < b.nodes; }) -
          kept.begin());
    }
    StreamSpan& into = kept[*target];
    if (position[span.last] > position[into.last]) into.last = span.last;
    into.nodes += span.nodes;
    kept_of[span.stream] = static_cast<int>(*target);
  }
  for (int& stream : streams.stream_of) {
    if (stream != kNoStream) stream = kept_of[stream];
  }
  streams.stream_count = static_cast<int>(kept.size());
}

}  // namespace opara
