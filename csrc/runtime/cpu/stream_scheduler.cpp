#include "runtime/cpu/stream_scheduler.h"

#include <algorithm>
#include <utility>

namespace opara {

StreamScheduler::StreamScheduler(const Plan& plan, std::vector<double> priorities)
    : plan_(plan),
      stream_nodes_(plan.stream_nodes()),
      priorities_(std::move(priorities)),
      next_of_(static_cast<std::size_t>(plan.stream_count), 0),
      recorded_(plan.stream_of.size(), 0),
      parked_(plan.stream_of.size()) {}

void StreamScheduler::start_run() {
  std::fill(next_of_.begin(), next_of_.end(), 0);
  std::fill(recorded_.begin(), recorded_.end(), 0);
  for (auto& streams : parked_) streams.clear();
  ready_ = {};
  ready_count_.store(0, std::memory_order_relaxed);
  int streams = 0;
  for (int stream = 0; stream < plan_.stream_count; ++stream) {
    if (stream_nodes_[stream].empty()) continue;
    ++streams;
    schedule(stream);
  }
  streams_left_.store(streams, std::memory_order_relaxed);
}

StreamScheduler::Turn StreamScheduler::take() {
  const int stream = std::get<2>(ready_.top());
  ready_.pop();
  ready_count_.store(ready_.size(), std::memory_order_relaxed);
  return {stream, stream_nodes_[stream][next_of_[stream]]};
}

std::size_t StreamScheduler::complete(Turn turn) {
  std::size_t woken = 0;
  if (plan_.records[turn.node]) {
    recorded_[turn.node] = 1;
    for (int waiting : parked_[turn.node]) woken += schedule(waiting) ? 1 : 0;
    parked_[turn.node].clear();
  }
  if (++next_of_[turn.stream] < stream_nodes_[turn.stream].size()) {
    woken += schedule(turn.stream) ? 1 : 0;
  } else {
    streams_left_.store(streams_left_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  }
  return woken;
}

bool StreamScheduler::schedule(int stream) {
  const NodeId next = stream_nodes_[stream][next_of_[stream]];
  for (NodeId event : plan_.waits[next]) {
    if (!recorded_[event]) {
      parked_[event].push_back(stream);
      return false;
    }
  }
  push_ready(next, stream);
  return true;
}

void StreamScheduler::push_ready(NodeId next, int stream) {
  ready_.emplace(priorities_.empty() ? 0.0 : priorities_[next], -ready_sequence_++, stream);
  ready_count_.store(ready_.size(), std::memory_order_relaxed);
}

}  // namespace opara
