// Events for a stream assignment: every dependency u -> v between kernel nodes on different
// streams needs v's stream to wait, before v, on an event recorded after u, unless same-stream
// order and the waits already placed imply it. That is the transitive reduction of the DAG made of
// the waits and each stream's order, built greedily in launch order with vector clocks:
//
//   known[s][t] = the last position on stream t that stream s has (transitively) waited for.
//
// A dependency u -> v (u on t, v on s) is implied exactly when known[s][t] >= position of u on t.
// The candidates of one node are tried latest-launched first: a wait on a later node can imply one
// on an earlier node but never the reverse, so no wait placed is implied by the others.
//
// Clocks are sparse and shared between the nodes of a stream until the stream's next wait, and a
// stream is dropped from every clock once all edges out of it are consumed, so memory follows the
// number of streams alive at once rather than the total (Opara opens thousands on large graphs).
#include <algorithm>
#include <limits>
#include <memory>
#include <utility>

#include "schedule/stages.h"

namespace opara {
namespace {

// (stream, last position on it known to happen before), sorted by stream.
using Clock = std::vector<std::pair<int, std::int32_t>>;

class EventPlanner {
 public:
  EventPlanner(const KernelDag& dag, const std::vector<int>& stream_of, const std::vector<NodeId>& order)
      : dag_(dag), stream_of_(stream_of), order_(order) {
    const std::size_t count = dag.launches_kernel.size();
    int streams = 0;
    for (int stream : stream_of) streams = std::max(streams, stream + 1);
    known_.assign(static_cast<std::size_t>(streams), std::make_shared<const Clock>());
    next_slot_.assign(static_cast<std::size_t>(streams), 0);
    edges_left_.assign(static_cast<std::size_t>(streams), 0);
    dead_.assign(static_cast<std::size_t>(streams), 0);
    slot_.assign(count, -1);
    clock_at_.resize(count);
    for (NodeId id = 0; id < static_cast<NodeId>(count); ++id) {
      if (dag.is_kernel(id)) edges_left_[stream_of[id]] += dag.successors[id].size();
    }
    position_ = positions_in(order, count);
    result_.waits.resize(count);
    result_.records.assign(count, 0);
  }

  EventPlan plan() {
    std::vector<NodeId> candidates;
    for (NodeId node : order_) {
      if (!dag_.is_kernel(node)) continue;
      const int stream = stream_of_[node];
      candidates.clear();
      for (NodeId predecessor : dag_.predecessors[node]) {
        const int from = stream_of_[predecessor];
        if (from == stream) continue;
        ++result_.unreduced;
        // Of several predecessors on one stream only the latest can be needed.
        auto same =
            std::find_if(candidates.begin(), candidates.end(), [&](NodeId other) { return stream_of_[other] == from; });
        if (same == candidates.end()) {
          candidates.push_back(predecessor);
        } else if (slot_[predecessor] > slot_[*same]) {
          *same = predecessor;
        }
      }
      std::sort(candidates.begin(), candidates.end(), [&](NodeId a, NodeId b) { return position_[a] > position_[b]; });
      for (NodeId predecessor : candidates) {
        if (happens_before(predecessor, stream)) continue;
        result_.waits[node].push_back(predecessor);
        result_.records[predecessor] = 1;
        known_[stream] = std::make_shared<const Clock>(merged(*known_[stream], predecessor, stream));
      }
      std::sort(result_.waits[node].begin(), result_.waits[node].end(),
                [&](NodeId a, NodeId b) { return position_[a] < position_[b]; });
      clock_at_[node] = known_[stream];
      slot_[node] = next_slot_[stream]++;
      for (NodeId predecessor : dag_.predecessors[node]) {
        const int from = stream_of_[predecessor];
        if (--edges_left_[from] == 0) dead_[from] = 1;
      }
    }
    return std::move(result_);
  }

 private:
  // Whether `node` (launched earlier, on another stream) is already ordered before what `stream`
  // launches next.
  [[nodiscard]] bool happens_before(NodeId node, int stream) const {
    const Clock& clock = *known_[stream];
    const int from = stream_of_[node];
    auto entry = std::lower_bound(clock.begin(), clock.end(), std::make_pair(from, std::int32_t{-1}));
    return entry != clock.end() && entry->first == from && entry->second >= slot_[node];
  }

  // `clock` joined with what waiting on `node` brings: the node itself and everything its stream
  // knew when it was launched. Streams nothing can ask about any more are left out.
  [[nodiscard]] Clock merged(const Clock& clock, NodeId node, int stream) const {
    const Clock& theirs = *clock_at_[node];
    const std::pair<int, std::int32_t> own{stream_of_[node], slot_[node]};
    Clock result;
    result.reserve(clock.size() + theirs.size() + 1);
    auto keep = [&](const std::pair<int, std::int32_t>& entry) {
      if (entry.first == stream || dead_[entry.first]) return;
      if (!result.empty() && result.back().first == entry.first) {
        result.back().second = std::max(result.back().second, entry.second);
      } else {
        result.push_back(entry);
      }
    };
    auto a = clock.begin();
    auto b = theirs.begin();
    bool own_done = false;
    // Three sorted sources: `clock`, `theirs` and the single entry `own`.
    while (a != clock.end() || b != theirs.end() || !own_done) {
      int next = own_done ? std::numeric_limits<int>::max() : own.first;
      if (a != clock.end()) next = std::min(next, a->first);
      if (b != theirs.end()) next = std::min(next, b->first);
      if (a != clock.end() && a->first == next) keep(*a++);
      if (b != theirs.end() && b->first == next) keep(*b++);
      if (!own_done && own.first == next) {
        keep(own);
        own_done = true;
      }
    }
    return result;
  }

  const KernelDag& dag_;
  const std::vector<int>& stream_of_;
  const std::vector<NodeId>& order_;
  std::vector<std::shared_ptr<const Clock>> known_;     // by stream
  std::vector<std::shared_ptr<const Clock>> clock_at_;  // by node: its stream's clock when launched
  std::vector<std::int32_t> slot_;                      // by node: position on its stream
  std::vector<std::int32_t> next_slot_;                 // by stream
  std::vector<std::size_t> edges_left_;                 // by stream: edges out of it not yet consumed
  std::vector<std::uint8_t> dead_;                      // by stream
  std::vector<std::int32_t> position_;                  // by node: position in launch order
  EventPlan result_;
};

}  // namespace

EventPlan plan_events(const KernelDag& dag, const std::vector<int>& stream_of, const std::vector<NodeId>& order) {
  return EventPlanner(dag, stream_of, order).plan();
}

}  // namespace opara
