#pragma once

#include <ATen/core/ivalue.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "exec/node_op.h"
#include "opara/graph.h"
#include "runtime/cpu/node_split.h"
#include "runtime/cpu/thread_jitter.h"

namespace opara {

// Note [Split nodes]
// With one intra-op thread per worker, a long node often runs while the other workers have nothing
// ready (GoogLeNet's max pooling between two inception modules, on every plan of many streams). Its
// owner then posts a SplitJob (one at a time), runs pieces itself and lets idle workers claim the
// others: a claim is a fetch_add on `next`, made by helpers under the scheduler's mutex (so the job
// is still posted, and alive, when they touch it); each piece, once placed, adds one to `done`, a
// helper's last touch of the job. The owner retracts the job under the mutex once no piece is left
// to claim, then waits for `done` to reach the piece count. Only nodes that took at least
// split_min_us in an earlier run are split (the first run measures each one).

// One split run of a node, on its owner's stack.
struct SplitJob {
  SplitJob(NodeId id, const NodeOp& node_op, const std::vector<c10::IValue>& arguments, NodeSplit split)
      : node(id), op(node_op), inputs(arguments), output(std::move(split)) {}
  NodeId node;
  const NodeOp& op;
  const std::vector<c10::IValue>& inputs;
  SplitOutput output;
  std::atomic<int> next{0};  // the next piece to claim
  std::atomic<int> done{0};  // pieces placed (or failed)
  std::mutex error_mutex;
  std::exception_ptr error;  // the first piece that failed
};

// Splitting long nodes among idle workers: which nodes may split, the posted job, and how many
// workers are idle.
//
// Locking: shares the executor's scheduling mutex and its condition variable (idle workers wait on
// it for a stream or a piece). pieces_to_claim() and help() with that mutex held; run_split()
// without it (it takes it to post and retract). The idle count, help_wanted(), the split count and
// the nodes' last times are atomics, read and written without a lock (relaxed: each only decides
// whether to split or to stop spinning, and is checked again under the mutex).
class SplitCoordinator {
 public:
  // Nodes split only with one intra-op thread per worker and split_min_us above 0.
  SplitCoordinator(const Graph& graph, double split_min_us, int intra_op_threads, int workers, std::mutex& mutex,
                   std::condition_variable& work_ready);

  // Whether node `id` is of a kind that may split (its whole runs are timed).
  [[nodiscard]] bool splittable(NodeId id) const { return splittable_[static_cast<std::size_t>(id)] != 0; }
  // How long a whole run of splittable node `id` took: the next run decides by it.
  void record_whole_run(NodeId id, double took_us) {
    last_run_us_[static_cast<std::size_t>(id)].store(took_us, std::memory_order_relaxed);
  }

  // The worker about to run splittable node `id` on `stack`: runs it split among the idle workers
  // and leaves its output in `stack` (true), or runs nothing (false) when no worker idles, the node
  // was short last time, cannot be cut, or another split is under way. Rethrows a piece's failure.
  bool run_split(NodeId id, const NodeOp& op, std::vector<c10::IValue>& stack);

  // With the mutex held: whether a posted split has pieces left to claim.
  [[nodiscard]] bool pieces_to_claim() const;
  // With `lock` on the mutex: claims and runs one piece of the posted split, unlocked meanwhile;
  // false when there was none.
  bool help(std::unique_lock<std::mutex>& lock, ThreadJitter& jitter);
  // A split is posted: a spinning worker stops to help. Without the mutex.
  [[nodiscard]] bool help_wanted() const { return posted_.load(std::memory_order_relaxed) != nullptr; }

  // A worker starts or stops waiting for work (spinning or asleep).
  void worker_idle() { idle_workers_.fetch_add(1, std::memory_order_relaxed); }
  void worker_busy() { idle_workers_.fetch_sub(1, std::memory_order_relaxed); }

  [[nodiscard]] std::size_t split_runs() const { return split_runs_.load(std::memory_order_relaxed); }

 private:
  const Graph& graph_;
  const double split_min_us_;
  const int workers_;
  std::mutex& mutex_;
  std::condition_variable& work_ready_;
  std::vector<std::uint8_t> splittable_;  // by NodeId: OpTraits::splits_by_plane, one intra-op thread
  // By NodeId: microseconds its last whole run took (0: not run yet).
  std::unique_ptr<std::atomic<double>[]> last_run_us_;
  std::atomic<SplitJob*> posted_{nullptr};  // written under the mutex
  std::atomic<int> idle_workers_{0};
  std::atomic<std::size_t> split_runs_{0};
};

}  // namespace opara
