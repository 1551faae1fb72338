#pragma once

#include <ATen/core/ivalue.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "opara/graph.h"
#include "opara/options.h"
#include "opara/plan.h"

namespace opara {

// The executor's knobs: the user's (`cpu`) and those compile() and the tuner set.
struct CpuExecutorOptions {
  // The user's, as compile() takes them (Options::cpu); tuning_ms is compile()'s, not read here.
  //
  // cpu.intra_op_threads 0: the usable cores divided by the streams, at least 1.
  //
  // cpu.pin_workers pins each worker to a CPU of its own when the workers fill the usable CPUs one
  // intra-op thread each: unpinned, Linux may keep two busy workers on one core for milliseconds
  // while another idles. With fewer workers than CPUs they are left to the scheduler (pinned,
  // several processes would all crowd the first CPUs), and a worker with an OpenMP team of several
  // threads is never pinned (its team would inherit the one CPU).
  //
  // cpu.split_min_us: a worker about to run a node that computes each plane on its own (pooling,
  // element-wise activations) while other workers idle splits it along batch or channels and lets
  // them run pieces, when the node took at least this long alone in an earlier run (the first run
  // measures). Same bits as the whole node. 0 or less: never split.
  CpuOptions cpu;
  // Non-zero: before each node a worker yields or sleeps a few microseconds at random, from this
  // seed, so that tests see many thread interleavings.
  std::uint64_t jitter_seed = 0;
  // Host threads that run the streams; 0: as many as streams, at most usable_cores().
  int workers = 0;
  // By node, or empty: among ready streams, the one whose next node has the highest priority runs
  // first (e.g. the longest remaining path in measured time); ties and empty: first ready, first run.
  std::vector<double> priorities;
  // When set, called after each node ran, on the thread that ran it, with when it started and
  // ended (for traces). Nodes run concurrently, so it must be thread-safe; each node of a run is
  // reported once.
  std::function<void(NodeId, std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point)>
      on_node_done;
};

// The CPUs the calling thread may run on: its affinity mask, so fewer than the machine has under
// taskset or a cpuset, and the place OpenMP bound it to under OMP_PROC_BIND. The executor sizes
// its workers and intra-op threads by it; at least 1.
int usable_cores();

// The intra-op threads each worker of a plan of `streams` streams runs with: `requested` where more
// than 0, else usable_cores() / streams, at least 1.
int worker_intra_op_threads(int requested, int streams);

// Priorities for CpuExecutorOptions::priorities: each node's longest remaining path to the end, in
// host time measured on three eager runs of `arguments` (the fastest of each node's), so that the
// ready stream on the critical path runs first.
std::vector<double> critical_path_priorities(const Graph& graph, const std::vector<c10::IValue>& arguments);

// Executes a Plan on the CPU: a pool of host threads with one queue per stream. Each stream runs
// its nodes in launch order, one at a time; a stream whose next node waits on an event not yet
// recorded is parked until it is. Nodes that launch no kernel run on whichever worker needs their
// result first. Outputs equal EagerExecutor's bit for bit when eager runs with the same
// intra-op thread count (reductions split their work by it). One run at a time: run() from two
// threads at once throws.
class CpuParallelExecutor {
 public:
  // Checks the plan (require_valid) and starts the worker threads; run() hands each run to them.
  CpuParallelExecutor(const Graph& graph, Plan plan, CpuExecutorOptions options = {});
  ~CpuParallelExecutor();
  CpuParallelExecutor(const CpuParallelExecutor&) = delete;
  CpuParallelExecutor& operator=(const CpuParallelExecutor&) = delete;

  // Throws opara::Error for a wrong input count, or naming the node that failed; the executor
  // stays usable. Never changes the calling thread's intra-op threads.
  std::vector<c10::IValue> run(const std::vector<c10::IValue>& inputs);

  [[nodiscard]] const Plan& plan() const;
  [[nodiscard]] int intra_op_threads() const;
  [[nodiscard]] int workers() const;
  // The CPU each pool worker is pinned to, by worker (-1 where the system refused); empty when
  // the workers are not pinned.
  [[nodiscard]] std::vector<int> worker_cpus() const;
  // Node runs split among workers so far (CpuExecutorOptions::cpu.split_min_us).
  [[nodiscard]] std::size_t split_runs() const;
  // Microseconds each node took in the last run recorded, by NodeId (a split node: until its
  // pieces were placed); 0 for nodes not recorded yet. Runs are recorded between
  // record_node_times(true) and (false) (off by default: the clock costs a little a node), and
  // nodes reported to CpuExecutorOptions::on_node_done always. Read between runs.
  void record_node_times(bool record);
  [[nodiscard]] std::vector<double> node_times() const;
  // Replaces CpuExecutorOptions::on_node_done (empty: none) for the runs that follow. Throws
  // opara::Error when called during a run.
  void set_on_node_done(
      std::function<void(NodeId, std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point)>
          on_node_done);
  // Replaces CpuExecutorOptions::priorities (by NodeId, or empty: first ready, first run) for the
  // runs that follow. Throws opara::Error for a wrong count, or when called during a run.
  void set_priorities(std::vector<double> priorities);
  [[nodiscard]] const std::vector<double>& priorities() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace opara
