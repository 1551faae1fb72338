#include "runtime/cpu/split_coordinator.h"

#include <algorithm>
#include <optional>
#include <thread>
#include <utility>

#include "graph/op_table.h"

namespace opara {
namespace {

// Runs one piece of `job` and counts it done, its failure kept: the last touch of `job`.
void run_piece(const Graph& graph, SplitJob& job, int piece) {
  try {
    job.output.run_piece(graph, job.node, job.op, job.inputs, piece);
  } catch (...) {
    std::lock_guard<std::mutex> lock(job.error_mutex);
    if (!job.error) job.error = std::current_exception();
  }
  job.done.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace

SplitCoordinator::SplitCoordinator(const Graph& graph, double split_min_us, int intra_op_threads, int workers,
                                   std::mutex& mutex, std::condition_variable& work_ready)
    : graph_(graph),
      split_min_us_(split_min_us),
      workers_(workers),
      mutex_(mutex),
      work_ready_(work_ready),
      splittable_(graph.size(), 0),
      last_run_us_(std::make_unique<std::atomic<double>[]>(graph.size())) {
  for (const Node& node : graph.nodes()) {
    last_run_us_[node.id].store(0, std::memory_order_relaxed);
    splittable_[node.id] =
        split_min_us > 0 && intra_op_threads == 1 && node.outputs.size() == 1 && op_traits(node.kind).splits_by_plane;
  }
}

bool SplitCoordinator::run_split(NodeId id, const NodeOp& op, std::vector<c10::IValue>& stack) {
  const int idle = idle_workers_.load(std::memory_order_relaxed);
  if (idle == 0 || last_run_us_[id].load(std::memory_order_relaxed) < split_min_us_) return false;
  std::optional<NodeSplit> split;
  try {
    split = split_node(graph_, id, stack, std::min(idle + 1, workers_));
  } catch (const std::exception&) {
    return false;  // a tensor it cannot reason about: the node runs whole, as it would have
  }
  if (!split) return false;
  const int pieces = split->pieces();
  SplitJob job(id, op, stack, std::move(*split));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (posted_.load(std::memory_order_relaxed)) return false;  // one split at a time
    posted_.store(&job, std::memory_order_relaxed);
  }
  work_ready_.notify_all();
  for (int piece = job.next.fetch_add(1); piece < pieces; piece = job.next.fetch_add(1)) run_piece(graph_, job, piece);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    posted_.store(nullptr, std::memory_order_relaxed);
  }
  // Pieces still running on helpers: they are short, and this worker has nothing else to do.
  while (job.done.load(std::memory_order_acquire) < pieces) std::this_thread::yield();
  if (job.error) std::rethrow_exception(job.error);
  stack.assign(1, job.output.take());
  split_runs_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool SplitCoordinator::pieces_to_claim() const {
  const SplitJob* job = posted_.load(std::memory_order_relaxed);
  return job && job->next.load(std::memory_order_relaxed) < job->output.split().pieces();
}

bool SplitCoordinator::help(std::unique_lock<std::mutex>& lock, ThreadJitter& jitter) {
  SplitJob* job = posted_.load(std::memory_order_relaxed);
  if (!job) return false;
  const int piece = job->next.fetch_add(1);  // under the mutex: the job stays posted, and alive
  if (piece >= job->output.split().pieces()) return false;
  lock.unlock();
  jitter.pause();
  run_piece(graph_, *job, piece);  // ends with the last touch of `job`
  lock.lock();
  return true;
}

}  // namespace opara
