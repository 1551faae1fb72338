#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <queue>
#include <tuple>
#include <vector>

#include "opara/plan.h"

namespace opara {

// Which stream runs next, for CpuParallelExecutor (the algorithm: cpu_parallel_executor.cpp).
//
// Each stream of the plan is a queue of its nodes in launch order. A stream is ready when the
// events its next node waits on have been recorded; it is parked on the first missing one until
// that one is. Among ready streams the one whose next node has the highest priority goes first;
// ties (and no priorities), the first ready. A stream taken is running until its node completes,
// so a stream never has two nodes running at once.
//
// Locking: none of its own. Every member function but start_run() and the *_relaxed ones is
// called with the executor's scheduling mutex held; that mutex orders a node after the events it
// waited on. start_run() is called by the calling thread of run() before any worker wakes (the
// pool's hand-over publishes it). The *_relaxed ones may be called without the mutex, by a
// spinning worker that takes it before it acts on what it read: each reads an atomic mirror that
// this class alone writes.
class StreamScheduler {
 public:
  StreamScheduler(const Plan& plan, std::vector<double> priorities);

  // A stream taken to run its next node.
  struct Turn {
    int stream;
    NodeId node;
  };

  // Every stream with nodes back to its first, no event recorded, and queued or parked.
  void start_run();
  // Takes the ready stream of highest priority. Requires has_ready().
  Turn take();
  // `turn`'s node ran: records its event where the plan does (the streams parked on it are
  // scheduled again) and schedules its stream's next node. Returns how many streams became ready.
  std::size_t complete(Turn turn);

  [[nodiscard]] bool has_ready() const { return !ready_.empty(); }
  // No stream has nodes left in this run.
  [[nodiscard]] bool done() const { return streams_left_.load(std::memory_order_relaxed) == 0; }
  [[nodiscard]] bool has_ready_relaxed() const { return ready_count_.load(std::memory_order_relaxed) > 0; }
  [[nodiscard]] bool done_relaxed() const { return done(); }

  // By NodeId, or empty (first ready, first run). Between runs.
  void set_priorities(std::vector<double> priorities) { priorities_ = std::move(priorities); }
  [[nodiscard]] const std::vector<double>& priorities() const { return priorities_; }

 private:
  // Queues `stream` if its next node's events are all recorded (true), else parks it on the first
  // missing one.
  bool schedule(int stream);
  void push_ready(NodeId next, int stream);

  const Plan& plan_;
  std::vector<std::vector<NodeId>> stream_nodes_;  // by stream, in launch order
  std::vector<double> priorities_;
  std::vector<std::size_t> next_of_;      // by stream: index of its next node in stream_nodes_
  std::vector<std::uint8_t> recorded_;    // by NodeId: its event has fired this run
  std::vector<std::vector<int>> parked_;  // by NodeId: streams whose next node waits on its event
  // Streams whose next node can run now: (priority, -sequence, stream), so the highest priority
  // first, then the order they became ready.
  std::priority_queue<std::tuple<double, std::int64_t, int>> ready_;
  std::int64_t ready_sequence_ = 0;
  // The mirrors a spinning worker reads without the mutex: ready_.size(), written by push_ready(),
  // take() and start_run() only; and the streams with nodes still to run, written under the mutex
  // (a plain store: no other thread writes it).
  std::atomic<std::size_t> ready_count_{0};
  std::atomic<int> streams_left_{0};
};

}  // namespace opara
