#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "opara/graph.h"
#include "opara/plan.h"

namespace opara {

// Note [Nodes without a stream]
// A node with `stream_of == kNoStream` (a view, a size, a list construct: no kernel) runs lazily,
// exactly once per run, on whichever thread first needs it: before any node runs (with or without
// a stream), every no-stream node it reaches backwards through no-stream nodes only is ensured, in
// id order (a topological order). That honours every edge whose source has no stream. An edge into
// a no-stream node from a kernel node is honoured by the plan: validate() orders kernel nodes
// connected through no-stream nodes, so the consumer that ensures the no-stream node has waited for
// the kernel producer already. Once the workers finish, the calling thread ensures the no-stream
// nodes nobody needed (graph outputs among them), in id order.
//
// Locking: each no-stream node has a done flag (stored with release after it ran, loaded with
// acquire, so its outputs are published to whoever sees it set) and a mutex held while it runs (a
// second thread that needs it waits). start_run() by the calling thread of run() alone, while no
// worker runs.
class NoStreamNodes {
 public:
  NoStreamNodes(const Graph& graph, const Plan& plan);

  // Every node not run yet.
  void start_run();

  // Ensures the no-stream nodes `id` needs, in id order. `run(node)` runs one (false: it failed,
  // or the run was aborted); false when one of them returned false.
  template <class Run>
  bool ensure_inputs_of(NodeId id, Run&& run) {
    for (NodeId ancestor : ancestors_[static_cast<std::size_t>(id)]) {
      if (!ensure(ancestor, run)) return false;
    }
    return true;
  }

  // Runs no-stream node `id` with `run` unless some thread has; its own no-stream ancestors must be
  // done.
  template <class Run>
  bool ensure(NodeId id, Run&& run) {
    Flag& flag = flags_[static_cast<std::size_t>(id)];
    if (flag.done.load(std::memory_order_acquire)) return true;
    std::lock_guard<std::mutex> lock(flag.mutex);
    if (flag.done.load(std::memory_order_relaxed)) return true;
    if (!run(id)) return false;
    flag.done.store(true, std::memory_order_release);
    return true;
  }

 private:
  // std::once_flag cannot be reset between runs.
  struct Flag {
    std::atomic<bool> done{false};
    std::mutex mutex;
  };

  // By NodeId: the no-stream nodes reached backwards through no-stream nodes only, in id order.
  std::vector<std::vector<NodeId>> ancestors_;
  std::unique_ptr<Flag[]> flags_;  // by NodeId; used for no-stream nodes
  std::size_t node_count_;
};

}  // namespace opara
