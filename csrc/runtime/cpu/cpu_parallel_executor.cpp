// Runs a Plan on the CPU with a pool of host threads and one queue per stream.
//
// Each stream of the plan is a queue of its nodes in launch order. A stream is ready when the
// events its next node waits on have been recorded; a free worker takes a ready stream (the one
// whose next node has the highest priority, when priorities are given), runs that one node, records the node's event
// when `plan.records[node]`, and puts the stream back if its next node is ready too. A stream never has two nodes
// running at once, so each stream keeps its order; events are one-shot flags that unblock the streams waiting on them.
//
//   stream 0:  a ---------> c ---- d          plan: a, b on different streams, c waits on b's
//   stream 1:  b --(event b)-^                      event: stream 0 is not ready until b records.
//
// Workers: min(streams, cores) threads (CpuExecutorOptions::workers to choose), so plans with many
// streams (Opara opens 28 on GoogLeNet) never oversubscribe the cores, and no thread blocks while
// another stream has work. The calling thread of run() hands the run over and waits (were it to
// work as well, it would compete for the cores), except with a single worker of its own intra-op
// thread count: then it is that worker (Note [Intra-op threads per thread]). Workers of one
// intra-op thread each that fill the usable CPUs are pinned to one each (worker_affinity.h).
//
// A worker about to run a long node that computes each plane on its own (pooling, activations)
// while others idle splits it (node_split.h): see Note [Split nodes] (split_coordinator.h).
//
// Nodes that launch no kernel (views, sizes, list constructs) have no stream: see Note [Nodes
// without a stream] (no_stream_nodes.h). Outputs equal EagerExecutor's bit for bit: every node runs the same NodeOp on
// the same inputs; only which thread runs it, and when, differ.
//
// The run's state is split by concern, each with its own locking (stated in its header):
// StreamScheduler (which stream runs next; under `mutex`), SplitCoordinator (long nodes shared
// with idle workers; posted under `mutex`), ValueStore (the values; Note [Publication of values]),
// NoStreamNodes (a done flag and a mutex per node), RunFailure (the first error) and WorkerPool
// (the threads and the hand-over of each run, under a mutex of its own).
#include "runtime/cpu/cpu_parallel_executor.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "exec/node_op.h"
#include "opara/error.h"
#include "runtime/cpu/no_stream_nodes.h"
#include "runtime/cpu/run_failure.h"
#include "runtime/cpu/split_coordinator.h"
#include "runtime/cpu/stream_scheduler.h"
#include "runtime/cpu/thread_jitter.h"
#include "runtime/cpu/value_store.h"
#include "runtime/cpu/worker_affinity.h"
#include "runtime/cpu/worker_pool.h"

namespace opara {
namespace {

void require_priorities_fit(const Graph& graph, const std::vector<double>& priorities) {
  if (!priorities.empty() && priorities.size() != graph.size()) {
    throw Error(fmt::format("{}: {} node priorities given for a graph of {} nodes", graph.source_path,
                            priorities.size(), graph.size()));
  }
}

// How long an idle worker of one intra-op thread waits for work before it sleeps (work()).
constexpr std::chrono::microseconds kSpinBeforeSleeping{1000};

// Note [Intra-op threads per thread]: with ATen's OpenMP backend, at::set_num_threads() calls
// omp_set_num_threads(), which sets the calling thread's own ICV, and at::get_num_threads()
// returns omp_get_max_threads() of the calling thread: so each worker has its own count. It also
// stores a process-wide value that a thread copies the first time it asks (ATen's lazy
// per-thread initialisation); asking first (get) makes that copy happen before we set ours. And it
// resizes a shared thread pool, which is slow: so counts are set once per worker thread, never per
// run, and only the pool's threads run nodes.

// How many workers, of how many intra-op threads each, on which CPUs: the options checked against
// the plan and the usable CPUs.
struct WorkerShape {
  std::vector<int> cpus;  // allowed_cpus(), read once: it sizes the workers and says where to pin
  int cores = 1;          // usable_cores()
  int workers = 1;
  int intra_op_threads = 1;
};

WorkerShape checked_worker_shape(const Graph& graph, const Plan& plan, const CpuExecutorOptions& options) {
  require_valid(graph, plan);
  const int threads = options.cpu.intra_op_threads;
  if (threads < 0) {
    throw Error(
        fmt::format("{}: intra_op_threads must be 0 (automatic) or positive, not {}", graph.source_path, threads));
  }
  WorkerShape shape;
  shape.cpus = allowed_cpus();
  shape.cores = std::max(1, static_cast<int>(shape.cpus.size()));
  // Each worker starts that many threads: past the cores they only take turns (and thousands
  // take minutes to start).
  if (threads > shape.cores) {
    throw Error(
        fmt::format("{}: intra_op_threads {} is more than the {} cores here; give at most {}, or 0 for "
                    "cores / streams",
                    graph.source_path, threads, shape.cores, shape.cores));
  }
  require_priorities_fit(graph, options.priorities);
  if (options.workers < 0) {
    throw Error(
        fmt::format("{}: workers must be 0 (automatic) or positive, not {}", graph.source_path, options.workers));
  }
  const int streams = std::max(plan.stream_count, 1);
  shape.workers = options.workers > 0 ? options.workers : std::min(streams, shape.cores);
  shape.intra_op_threads = worker_intra_op_threads(threads, streams);
  return shape;
}

std::unique_ptr<std::atomic<double>[]> zero_times(std::size_t count) {
  auto times = std::make_unique<std::atomic<double>[]>(count);
  for (std::size_t k = 0; k < count; ++k) times[k].store(0, std::memory_order_relaxed);
  return times;
}

}  // namespace

int usable_cores() {
  return std::max(1, static_cast<int>(allowed_cpus().size()));
}

int worker_intra_op_threads(int requested, int streams) {
  return requested > 0 ? requested : std::max(1, usable_cores() / std::max(streams, 1));
}

struct CpuParallelExecutor::State {
  State(const Graph& g, Plan p, CpuExecutorOptions o);

  std::vector<c10::IValue> run(const std::vector<c10::IValue>& inputs);
  void require_input_count(const std::vector<c10::IValue>& inputs) const;

  // Starts the pool, unless the caller is the one worker (Note [Intra-op threads per thread]).
  void start_workers();
  // A pool thread's own settings, once: its CPU, its intra-op threads, no autograd.
  void set_up_worker(int worker);
  // Takes ready streams and runs their next nodes until the run ends; never throws (errors go to
  // `failure`).
  void work();
  // With `lock` held: helps with splits until a stream is ready (taken) or the run ended (none).
  std::optional<StreamScheduler::Turn> next_turn(std::unique_lock<std::mutex>& lock, ThreadJitter& jitter);
  // With `lock` held, nothing ready and streams left: yields until something may be, at most
  // kSpinBeforeSleeping.
  void spin_before_sleeping(std::unique_lock<std::mutex>& lock);
  // Runs no-stream node `id` unless the run was aborted.
  bool run_no_stream_node(NodeId id) { return !failure.aborted() && execute(id); }
  // Runs one node and publishes its outputs; false (after failure.fail()) when it threw. A
  // stream's node (`may_split`) may be split among idle workers.
  bool execute(NodeId id, bool may_split = false);
  void execute_or_throw(NodeId id, bool may_split);
  void record_time(NodeId id, std::chrono::steady_clock::time_point started, bool whole);

  // ---- fixed at construction --------------------------------------------------------------
  Graph graph;
  Plan plan;
  CpuExecutorOptions options;  // options.priorities: moved into `streams`, which reads them under `mutex`
  WorkerShape shape;
  std::vector<std::shared_ptr<const NodeOp>> ops;  // by NodeId
  // By pool worker, when pinned (-1: the system refused); each worker writes its own in its setup.
  std::vector<int> worker_cpus;

  // ---- node times: node_times() -------------------------------------------------------------
  // By NodeId: microseconds it took in the last run, split or not, while `record_times`.
  std::unique_ptr<std::atomic<double>[]> node_us;
  std::atomic<bool> record_times{false};

  // ---- per run ---------------------------------------------------------------------------------
  ValueStore values;
  NoStreamNodes no_stream;
  RunFailure failure;
  std::atomic<bool> in_run{false};
  // The caller's thread-local state (inference mode, grad mode, the profiler's), which the workers
  // take on for the run: under torch.inference_mode() an inference tensor (a KV cache) may only be
  // written in it.
  at::ThreadLocalState caller_state;

  // ---- the scheduler: `mutex` guards `streams` and the posted split ----------------------------
  std::mutex mutex;
  std::condition_variable work_ready;  // workers: a stream became ready, a split posted, the run ended
  StreamScheduler streams;
  SplitCoordinator splits;
  std::unique_ptr<WorkerPool> pool;  // last: its threads use all of the above; null when the caller works
};

CpuParallelExecutor::State::State(const Graph& g, Plan p, CpuExecutorOptions o)
    : graph(g),
      plan(std::move(p)),
      options(std::move(o)),
      shape(checked_worker_shape(graph, plan, options)),
      ops(ops_on_device(graph, c10::kCPU)),
      node_us(zero_times(graph.size())),
      values(graph),
      no_stream(graph, plan),
      streams(plan, std::move(options.priorities)),
      splits(graph, options.cpu.split_min_us, shape.intra_op_threads, shape.workers, mutex, work_ready) {
  start_workers();
}

void CpuParallelExecutor::State::start_workers() {
  // The caller's own count, read before the workers store theirs process-wide (Note [Intra-op
  // threads per thread]); stored back once they have started so later threads are not affected.
  const int caller_threads = at::get_num_threads();
  // One worker with the caller's own intra-op threads: the caller is that worker (no hand-off,
  // and ATen's OpenMP team stays the caller's: a second team spinning beside it halves speed).
  if (shape.workers == 1 && caller_threads == shape.intra_op_threads) return;
  if (options.cpu.pin_workers && shape.intra_op_threads == 1 && shape.workers == shape.cores)
    worker_cpus = shape.cpus;  // one each
  pool = std::make_unique<WorkerPool>(
      shape.workers, [this](int worker) { set_up_worker(worker); },
      [this] {
        const at::ThreadLocalStateGuard callers_mode(caller_state);
        work();
      });
  if (caller_threads != shape.intra_op_threads) at::set_num_threads(caller_threads);
}

void CpuParallelExecutor::State::set_up_worker(int worker) {
  // Pinned before its OpenMP state exists; refused, the thread runs unpinned, as it would have.
  const auto index = static_cast<std::size_t>(worker);
  if (!worker_cpus.empty() && !pin_current_thread(worker_cpus[index])) worker_cpus[index] = -1;
  // Thread-local settings, kept for the thread's life: Note [Intra-op threads per thread].
  (void)at::get_num_threads();
  at::set_num_threads(shape.intra_op_threads);
  c10::GradMode::set_enabled(false);  // inference, like EagerExecutor
}

void CpuParallelExecutor::State::work() {
  ThreadJitter jitter(options.jitter_seed);
  std::unique_lock<std::mutex> lock(mutex);
  while (const std::optional<StreamScheduler::Turn> turn = next_turn(lock, jitter)) {
    lock.unlock();
    jitter.pause();
    const bool ran = no_stream.ensure_inputs_of(turn->node, [this](NodeId id) { return run_no_stream_node(id); }) &&
                     execute(turn->node, /*may_split=*/true);
    lock.lock();
    if (!ran) {
      work_ready.notify_all();  // failure.fail() aborted the run: every worker leaves
      return;
    }
    for (std::size_t woken = streams.complete(*turn); woken > 0; --woken) work_ready.notify_one();
    if (streams.done()) work_ready.notify_all();
  }
}

std::optional<StreamScheduler::Turn> CpuParallelExecutor::State::next_turn(std::unique_lock<std::mutex>& lock,
                                                                           ThreadJitter& jitter) {
  for (;;) {
    if (splits.help(lock, jitter)) continue;
    if (!streams.has_ready() && !streams.done() && shape.intra_op_threads == 1) {
      spin_before_sleeping(lock);
      if (splits.help(lock, jitter)) continue;
    }
    splits.worker_idle();
    work_ready.wait(
        lock, [&] { return streams.has_ready() || streams.done() || failure.aborted() || splits.pieces_to_claim(); });
    splits.worker_busy();
    if (streams.done() || failure.aborted()) return std::nullopt;
    if (streams.has_ready()) return streams.take();
    // Woken to help with a split.
  }
}

void CpuParallelExecutor::State::spin_before_sleeping(std::unique_lock<std::mutex>& lock) {
  // Another stream's node usually finishes soon: spin (yielding the core) before sleeping. A
  // wake-up costs far more than a small node, hundreds of microseconds in a virtual machine
  // whose idle vCPU has halted, so a spin of the order of a node's time pays. Not
  // when nodes run on several intra-op threads: the spinning would take their cores.
  splits.worker_idle();
  lock.unlock();
  const auto give_up = std::chrono::steady_clock::now() + kSpinBeforeSleeping;
  // The run's end stops the spin too: the caller waits for every worker to leave.
  while (!streams.has_ready_relaxed() && !failure.aborted_relaxed() && !streams.done_relaxed() &&
         !splits.help_wanted() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  lock.lock();
  splits.worker_busy();
}

void CpuParallelExecutor::State::require_input_count(const std::vector<c10::IValue>& inputs) const {
  if (inputs.size() == graph.inputs().size()) return;
  std::string names;
  for (ValueId input : graph.inputs()) names += (names.empty() ? "" : ", ") + graph.value(input).name;
  throw Error(fmt::format("{}: the model takes {} inputs ({}), {} were given", graph.source_path, graph.inputs().size(),
                          names, inputs.size()));
}

std::vector<c10::IValue> CpuParallelExecutor::State::run(const std::vector<c10::IValue>& inputs) {
  require_input_count(inputs);
  if (in_run.exchange(true)) {
    throw Error(
        fmt::format("{}: CpuParallelExecutor::run called while another run is in progress; use one "
                    "executor per calling thread",
                    graph.source_path));
  }
  struct InRunReset {
    std::atomic<bool>& flag;
    ~InRunReset() { flag.store(false); }
  } in_run_reset{in_run};

  // No worker runs until the hand-over below, which publishes all of this to them.
  values.start_run(inputs);
  no_stream.start_run();
  failure.reset();
  streams.start_run();
  c10::AutoGradMode no_grad(false);
  if (pool) {
    caller_state = at::ThreadLocalState();  // published to the workers with the round
    pool->run_round();
  } else {
    work();  // on the caller's thread, already in its mode (capturing and setting it again: a microsecond)
  }
  // The no-stream nodes no stream needed: graph outputs made by views, and unused ones.
  for (NodeId id = 0; id < static_cast<NodeId>(graph.size()); ++id) {
    if (plan.stream_of[id] == kNoStream &&
        !no_stream.ensure(id, [this](NodeId node) { return run_no_stream_node(node); }))
      break;
  }
  if (failure.failed()) {
    values.clear();
    failure.rethrow();
  }
  return values.take_outputs();  // holds no tensors between runs
}

bool CpuParallelExecutor::State::execute(NodeId id, bool may_split) {
  try {
    execute_or_throw(id, may_split);
    return true;
  } catch (...) {
    failure.fail(std::current_exception());
    return false;
  }
}

void CpuParallelExecutor::State::execute_or_throw(NodeId id, bool may_split) {
  const Node& node = graph.node(id);
  std::vector<c10::IValue> stack;
  stack.reserve(std::max(node.inputs.size(), node.outputs.size()));
  values.push_inputs(node, stack);
  const bool splittable = splits.splittable(id);
  // The clock only where someone reads it: two reads a node are measurable on a model of small nodes.
  const bool timed = splittable || options.on_node_done || record_times.load(std::memory_order_relaxed);
  const auto started = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  const bool split = may_split && splittable && splits.run_split(id, *ops[id], stack);
  if (!split) run_node(graph, id, *ops[id], stack);
  if (timed) record_time(id, started, /*whole=*/!split && splittable);
  values.publish(node, stack);
}

void CpuParallelExecutor::State::record_time(NodeId id, std::chrono::steady_clock::time_point started, bool whole) {
  const auto ended = std::chrono::steady_clock::now();
  const double took_us = std::chrono::duration<double, std::micro>(ended - started).count();
  node_us[id].store(took_us, std::memory_order_relaxed);
  if (whole) splits.record_whole_run(id, took_us);
  if (options.on_node_done) options.on_node_done(id, started, ended);
}

CpuParallelExecutor::CpuParallelExecutor(const Graph& graph, Plan plan, CpuExecutorOptions options)
    : state_(std::make_unique<State>(graph, std::move(plan), std::move(options))) {}

CpuParallelExecutor::~CpuParallelExecutor() = default;

std::vector<c10::IValue> CpuParallelExecutor::run(const std::vector<c10::IValue>& inputs) {
  return state_->run(inputs);
}

const Plan& CpuParallelExecutor::plan() const {
  return state_->plan;
}

int CpuParallelExecutor::intra_op_threads() const {
  return state_->shape.intra_op_threads;
}

int CpuParallelExecutor::workers() const {
  return state_->shape.workers;
}

std::vector<int> CpuParallelExecutor::worker_cpus() const {
  return state_->worker_cpus;
}

std::vector<double> CpuParallelExecutor::node_times() const {
  std::vector<double> times(state_->graph.size());
  for (std::size_t id = 0; id < times.size(); ++id) times[id] = state_->node_us[id].load(std::memory_order_relaxed);
  return times;
}

void CpuParallelExecutor::record_node_times(bool record) {
  state_->record_times.store(record);
}

void CpuParallelExecutor::set_on_node_done(
    std::function<void(NodeId, std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point)>
        on_node_done) {
  State& state = *state_;
  if (state.in_run.load()) {
    throw Error(fmt::format("{}: set_on_node_done called during a run; call it between runs", state.graph.source_path));
  }
  std::lock_guard<std::mutex> lock(state.mutex);  // a run hands its nodes to the workers under it
  state.options.on_node_done = std::move(on_node_done);
}

void CpuParallelExecutor::set_priorities(std::vector<double> priorities) {
  State& state = *state_;
  require_priorities_fit(state.graph, priorities);
  if (state.in_run.load()) {
    throw Error(fmt::format("{}: set_priorities called during a run; call it between runs", state.graph.source_path));
  }
  std::lock_guard<std::mutex> lock(state.mutex);  // the workers read them under it
  state.streams.set_priorities(std::move(priorities));
}

const std::vector<double>& CpuParallelExecutor::priorities() const {
  return state_->streams.priorities();
}

std::size_t CpuParallelExecutor::split_runs() const {
  return state_->splits.split_runs();
}

}  // namespace opara
