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
// while others idle splits it (node_split.h): see Note [Split nodes].
//
// Nodes that launch no kernel (views, sizes, list constructs) have no stream: see Note [Nodes
// without a stream]. Outputs equal EagerExecutor's bit for bit: every node runs the same NodeOp on
// the same inputs; only which thread runs it, and when, differ.
//
// Note [Nodes without a stream]
// A node with `stream_of == kNoStream` runs lazily, exactly once per run, on whichever thread
// first needs it: before any node runs (with or without a stream), every no-stream node it reaches
// backwards through no-stream nodes only is ensured, in id order (a topological order). That
// honours every edge whose source has no stream. An edge into a no-stream node from a kernel node
// is honoured by the plan: validate() orders kernel nodes connected through no-stream nodes, so the
// consumer that ensures the no-stream node has waited for the kernel producer already. Once the
// workers finish, the calling thread ensures the no-stream nodes nobody needed (graph outputs
// among them), in id order.
//
// Note [Publication of values]
// `values` holds one slot per graph value. A slot is written once per run by the thread that
// runs its producer, and read by consumers that are ordered after the producer by one of: the
// scheduler's mutex (a node's event is recorded, and its stream handed on, under it after the node
// ran; the next node of a stream or of a waiting stream is taken under it), a no-stream node's
// done flag (release/acquire, or its mutex), or the end-of-run handshake with the calling thread. A slot is
// cleared (the value freed) by the consumer that decrements its atomic count of readers to zero
// (acq_rel): every other reader decremented after copying it out, so the clear comes after every
// read. Graph inputs and outputs are never cleared during a run.
//
// Note [Split nodes]
// With one intra-op thread per worker, a long node often runs while the other workers have
// nothing ready (GoogLeNet's max pooling between two inception modules, on every plan of many
// streams). Its owner then posts a SplitJob (under `mutex`, one at a time),
// runs pieces itself and lets idle workers claim the others: a claim is a fetch_add on `next`, made by helpers under
// `mutex` (so the job is still posted, and alive, when they touch it); each piece, once placed,
// adds one to `done`, a helper's last touch of the job. The owner retracts the job under `mutex`
// once no piece is left to claim, then waits for `done` to reach the piece count. Only nodes that
// took at least split_min_us in an earlier run are split (the first run measures each one).
#include "runtime/cpu/cpu_parallel_executor.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <queue>
#include <random>
#include <thread>
#include <tuple>

#include "exec/node_op.h"
#include "graph/op_table.h"
#include "opara/error.h"
#include "runtime/cpu/node_split.h"
#include "runtime/cpu/worker_affinity.h"

namespace opara {
namespace {

// One split run of a node: Note [Split nodes].
struct SplitJob {
  SplitJob(NodeId id, const std::vector<c10::IValue>& arguments, NodeSplit split)
      : node(id), inputs(arguments), output(std::move(split)) {}
  NodeId node;
  const std::vector<c10::IValue>& inputs;
  SplitOutput output;
  std::atomic<int> next{0};  // the next piece to claim
  std::atomic<int> done{0};  // pieces placed (or failed)
  std::mutex error_mutex;
  std::exception_ptr error;  // the first piece that failed
};

// Run-once state of a node without a stream (std::once_flag cannot be reset between runs).
struct LazyNode {
  std::atomic<bool> done{false};
  std::mutex mutex;  // held while the node runs: a second thread that needs it waits
};

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
}  // namespace

int usable_cores() {
  return std::max(1, static_cast<int>(allowed_cpus().size()));
}

struct CpuParallelExecutor::State {
  State(const Graph& g, Plan p, CpuExecutorOptions o);
  ~State();

  std::vector<c10::IValue> run(const std::vector<c10::IValue>& inputs);

  // Takes ready streams and runs their next nodes until the run ends; never throws (errors go to
  // fail()).
  void work();
  // With `mutex` held: queues `stream` if its next node's events are all recorded, else parks it
  // on the first missing one.
  void schedule(int stream);
  // Ensures the no-stream nodes `id` needs; false when the run was aborted.
  bool ensure_inputs_of(NodeId id);
  // Runs no-stream node `id` unless some thread has; its own no-stream ancestors must be done.
  bool ensure(NodeId id);
  // Runs one node and publishes its outputs; false (after fail()) when it threw. A stream's node
  // (`may_split`) may be split among idle workers.
  bool execute(NodeId id, bool may_split = false);
  void execute_or_throw(NodeId id, bool may_split);
  // Runs `id` on `stack` split among idle workers: false (nothing run) when it should not or
  // another split is under way. Note [Split nodes].
  bool run_split(NodeId id, std::vector<c10::IValue>& stack);
  // With `mutex` held: whether a posted split has pieces left to claim.
  bool pieces_to_claim() const;
  // With `lock` on `mutex`: claims and runs one piece of the posted split, unlocked meanwhile;
  // false when there was none.
  bool help_with_split(std::unique_lock<std::mutex>& lock, std::mt19937_64& random);
  void run_piece(SplitJob& job, int piece);
  // Keeps the first error and aborts the run: every worker stops taking nodes.
  void fail(std::exception_ptr error);
  void jitter(std::mt19937_64& random) const;
  void worker_main(int worker);
  void stop_workers() noexcept;
  void reset_run_state();

  // ---- fixed at construction --------------------------------------------------------------
  Graph graph;
  Plan plan;
  CpuExecutorOptions options;
  int intra_op_threads = 1;
  int worker_count = 0;
  // By pool worker, when pinned (-1: the system refused); each worker writes its own under `mutex`.
  std::vector<int> worker_cpus;
  std::vector<std::shared_ptr<const NodeOp>> ops;  // by NodeId
  std::vector<std::vector<NodeId>> stream_nodes;   // by stream, in launch order
  // By NodeId: the no-stream nodes reached backwards through no-stream nodes only, in id order.
  std::vector<std::vector<NodeId>> lazy_ancestors;
  std::vector<std::size_t> reader_count;  // by ValueId: distinct nodes that read it
  std::vector<std::uint8_t> pinned;       // by ValueId: graph inputs and outputs, never freed
  std::vector<std::uint8_t> splittable;   // by NodeId: OpTraits::splits_by_plane, one intra-op thread
  // By NodeId: microseconds its last whole run took (0: not run yet); read to decide a split.
  std::unique_ptr<std::atomic<double>[]> last_run_us;
  // By NodeId: microseconds it took in the last run, split or not, while `record_times` (node_times()).
  std::unique_ptr<std::atomic<double>[]> node_us;
  std::atomic<bool> record_times{false};

  // ---- per run: reset by the calling thread before the workers wake ------------------------
  std::vector<c10::IValue> values;                           // by ValueId; Note [Publication of values]
  std::unique_ptr<std::atomic<std::size_t>[]> readers_left;  // by ValueId
  std::unique_ptr<LazyNode[]> lazy;                          // by NodeId; used for no-stream nodes
  std::atomic<bool> aborted{false};
  std::mutex error_mutex;
  std::exception_ptr error;  // the first failure of the run, guarded by error_mutex

  // ---- the scheduler: guarded by `mutex` ---------------------------------------------------
  std::mutex mutex;
  std::condition_variable work_ready;    // workers: a stream became ready, the run ended, or stopping
  std::condition_variable finished;      // caller: `busy` reached 0, or a worker started
  std::vector<std::size_t> next_of;      // by stream: index of its next node in stream_nodes
  std::vector<std::uint8_t> recorded;    // by NodeId: its event has fired this run
  std::vector<std::vector<int>> parked;  // by NodeId: streams whose next node waits on its event
  // Streams whose next node can run now: highest priority of that node first, then the order they
  // became ready. (priority, -sequence, stream).
  std::priority_queue<std::tuple<double, std::int64_t, int>> ready;
  std::int64_t ready_sequence = 0;
  std::atomic<std::size_t> ready_count{0};  // ready.size(), readable without the mutex to spin on
  int streams_left = 0;                     // streams with nodes still to run this run
  std::atomic<bool> streams_done{false};    // streams_left reached 0, readable without the mutex
  std::uint64_t generation = 0;             // bumped once per run
  int busy = 0;                             // pool workers still inside the current run
  int started = 0;                          // pool workers that have set up their thread
  bool stopping = false;                    // set once, by the destructor
  std::vector<std::thread> threads;
  std::atomic<bool> in_run{false};

  // ---- split nodes: Note [Split nodes] ----------------------------------------------------
  SplitJob* posted = nullptr;            // guarded by `mutex`
  std::atomic<bool> help_wanted{false};  // `posted` is set: spinning workers stop to help
  std::atomic<int> idle_workers{0};      // workers spinning or waiting for work
  std::atomic<std::size_t> split_runs{0};
};

CpuParallelExecutor::State::State(const Graph& g, Plan p, CpuExecutorOptions o)
    : graph(g), plan(std::move(p)), options(o) {
  require_valid(graph, plan);
  if (options.intra_op_threads < 0) {
    throw Error(fmt::format("{}: intra_op_threads must be 0 (automatic) or positive, not {}", graph.source_path,
                            options.intra_op_threads));
  }
  // Read once: the mask sizes the workers and, when they fill it, says where each is pinned.
  const std::vector<int> cpus = allowed_cpus();
  const int cores = std::max(1, static_cast<int>(cpus.size()));  // usable_cores()
  // Each worker starts that many threads: past the cores they only take turns (and thousands
  // take minutes to start).
  if (options.intra_op_threads > cores) {
    throw Error(
        fmt::format("{}: intra_op_threads {} is more than the {} cores here; give at most {}, or 0 for "
                    "cores / streams",
                    graph.source_path, options.intra_op_threads, cores, cores));
  }
  require_priorities_fit(graph, options.priorities);
  if (options.workers < 0) {
    throw Error(
        fmt::format("{}: workers must be 0 (automatic) or positive, not {}", graph.source_path, options.workers));
  }
  worker_count = options.workers > 0 ? options.workers : std::min(std::max(plan.stream_count, 1), cores);
  intra_op_threads =
      options.intra_op_threads > 0 ? options.intra_op_threads : std::max(1, cores / std::max(1, plan.stream_count));

  const std::size_t node_count = graph.size();
  ops = ops_on_device(graph, c10::kCPU);
  stream_nodes = plan.stream_nodes();
  splittable.assign(node_count, 0);
  last_run_us = std::make_unique<std::atomic<double>[]>(node_count);
  node_us = std::make_unique<std::atomic<double>[]>(node_count);
  for (const Node& node : graph.nodes()) {
    last_run_us[node.id].store(0, std::memory_order_relaxed);
    node_us[node.id].store(0, std::memory_order_relaxed);
    splittable[node.id] = options.split_min_us > 0 && intra_op_threads == 1 && node.outputs.size() == 1 &&
                          op_traits(node.kind).splits_by_plane;
  }

  lazy_ancestors.resize(node_count);
  for (const Node& node : graph.nodes()) {  // ids are topological: predecessors are done first
    auto& ancestors = lazy_ancestors[node.id];
    for (NodeId predecessor : node.predecessors) {
      if (plan.stream_of[predecessor] != kNoStream) continue;
      ancestors.push_back(predecessor);
      const auto& further = lazy_ancestors[predecessor];
      ancestors.insert(ancestors.end(), further.begin(), further.end());
    }
    std::sort(ancestors.begin(), ancestors.end());
    ancestors.erase(std::unique(ancestors.begin(), ancestors.end()), ancestors.end());
  }

  const std::size_t value_count = graph.values().size();
  reader_count.resize(value_count);
  pinned.assign(value_count, 0);
  for (const Value& value : graph.values()) reader_count[value.id] = value.users.size();
  for (ValueId input : graph.inputs()) pinned[input] = 1;
  for (ValueId output : graph.outputs()) pinned[output] = 1;
  readers_left = std::make_unique<std::atomic<std::size_t>[]>(value_count);
  lazy = std::make_unique<LazyNode[]>(node_count);
  next_of.assign(static_cast<std::size_t>(plan.stream_count), 0);
  recorded.assign(node_count, 0);
  parked.resize(node_count);

  // The caller's own count, read before the workers store theirs process-wide (Note [Intra-op
  // threads per thread]); stored back once they have started so later threads are not affected.
  const int caller_threads = at::get_num_threads();
  try {
    // One worker with the caller's own intra-op threads: the caller is that worker (no hand-off,
    // and ATen's OpenMP team stays the caller's: a second team spinning beside it halves speed).
    const bool caller_is_the_worker = worker_count == 1 && caller_threads == intra_op_threads;
    if (options.pin_workers && intra_op_threads == 1 && !caller_is_the_worker && worker_count == cores)
      worker_cpus = cpus;  // one each
    for (int worker = 0; worker < worker_count && !caller_is_the_worker; ++worker) {
      threads.emplace_back([this, worker] { worker_main(worker); });
    }
  } catch (...) {
    stop_workers();  // ~State does not run when the constructor throws
    throw;
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    finished.wait(lock, [this] { return started == static_cast<int>(threads.size()); });
  }
  if (!threads.empty() && caller_threads != intra_op_threads) at::set_num_threads(caller_threads);
}

CpuParallelExecutor::State::~State() {
  stop_workers();
}

void CpuParallelExecutor::State::stop_workers() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  work_ready.notify_all();
  for (std::thread& thread : threads) thread.join();
  threads.clear();
}

void CpuParallelExecutor::State::worker_main(int worker) {
  // Pinned before its OpenMP state exists; refused, the thread runs unpinned, as it would have.
  const bool pinned = !worker_cpus.empty() && pin_current_thread(worker_cpus[static_cast<std::size_t>(worker)]);
  // Thread-local settings, kept for the thread's life: Note [Intra-op threads per thread].
  (void)at::get_num_threads();
  at::set_num_threads(intra_op_threads);
  c10::AutoGradMode no_grad(false);  // inference, like EagerExecutor
  std::uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex);
  if (!worker_cpus.empty() && !pinned) worker_cpus[static_cast<std::size_t>(worker)] = -1;
  ++started;
  finished.notify_all();
  for (;;) {
    work_ready.wait(lock, [&] { return stopping || generation != seen; });
    if (stopping) return;
    seen = generation;
    lock.unlock();
    work();
    lock.lock();
    if (--busy == 0) finished.notify_all();
  }
}

void CpuParallelExecutor::State::schedule(int stream) {
  const NodeId next = stream_nodes[stream][next_of[stream]];
  for (NodeId event : plan.waits[next]) {
    if (!recorded[event]) {
      parked[event].push_back(stream);
      return;
    }
  }
  ready.emplace(options.priorities.empty() ? 0.0 : options.priorities[next], -ready_sequence++, stream);
  ready_count.store(ready.size(), std::memory_order_relaxed);
  work_ready.notify_one();
}

void CpuParallelExecutor::State::work() {
  std::mt19937_64 random(options.jitter_seed ^ std::hash<std::thread::id>{}(std::this_thread::get_id()));
  std::unique_lock<std::mutex> lock(mutex);
  for (;;) {
    if (help_with_split(lock, random)) continue;
    if (ready.empty() && streams_left > 0 && intra_op_threads == 1) {
      // Another stream's node usually finishes soon: spin (yielding the core) before sleeping. A
      // wake-up costs far more than a small node, hundreds of microseconds in a virtual machine
      // whose idle vCPU has halted, so a spin of the order of a node's time pays. Not
      // when nodes run on several intra-op threads: the spinning would take their cores.
      idle_workers.fetch_add(1, std::memory_order_relaxed);
      lock.unlock();
      const auto give_up = std::chrono::steady_clock::now() + kSpinBeforeSleeping;
      // The run's end stops the spin too: the caller waits for every worker to leave.
      while (ready_count.load(std::memory_order_relaxed) == 0 && !aborted.load(std::memory_order_relaxed) &&
             !streams_done.load(std::memory_order_relaxed) && !help_wanted.load(std::memory_order_relaxed) &&
             std::chrono::steady_clock::now() < give_up) {
        std::this_thread::yield();
      }
      lock.lock();
      idle_workers.fetch_sub(1, std::memory_order_relaxed);
      if (help_with_split(lock, random)) continue;
    }
    idle_workers.fetch_add(1, std::memory_order_relaxed);
    work_ready.wait(lock, [&] { return !ready.empty() || streams_left == 0 || aborted.load() || pieces_to_claim(); });
    idle_workers.fetch_sub(1, std::memory_order_relaxed);
    if (streams_left == 0 || aborted.load()) return;
    if (ready.empty()) continue;  // woken to help with a split
    const int stream = std::get<2>(ready.top());
    ready.pop();
    ready_count.store(ready.size(), std::memory_order_relaxed);
    const NodeId id = stream_nodes[stream][next_of[stream]];
    lock.unlock();
    jitter(random);
    const bool ran = ensure_inputs_of(id) && execute(id, /*may_split=*/true);
    lock.lock();
    if (!ran) {
      work_ready.notify_all();  // fail() set `aborted`: every worker leaves
      return;
    }
    if (plan.records[id]) {
      recorded[id] = 1;
      for (int waiting : parked[id]) schedule(waiting);
      parked[id].clear();
    }
    if (++next_of[stream] < stream_nodes[stream].size()) {
      schedule(stream);
    } else if (--streams_left == 0) {
      streams_done.store(true, std::memory_order_relaxed);
      work_ready.notify_all();
    }
  }
}

void CpuParallelExecutor::State::reset_run_state() {
  values.assign(graph.values().size(), c10::IValue());
  for (std::size_t id = 0; id < reader_count.size(); ++id)
    readers_left[id].store(reader_count[id], std::memory_order_relaxed);
  for (std::size_t id = 0; id < graph.size(); ++id) lazy[id].done.store(false, std::memory_order_relaxed);
  std::fill(next_of.begin(), next_of.end(), 0);
  std::fill(recorded.begin(), recorded.end(), 0);
  for (auto& streams : parked) streams.clear();
  ready = {};
  ready_count.store(0, std::memory_order_relaxed);
  aborted.store(false, std::memory_order_relaxed);
  streams_done.store(false, std::memory_order_relaxed);
  error = nullptr;
}

std::vector<c10::IValue> CpuParallelExecutor::State::run(const std::vector<c10::IValue>& inputs) {
  if (inputs.size() != graph.inputs().size()) {
    std::string names;
    for (ValueId input : graph.inputs()) names += (names.empty() ? "" : ", ") + graph.value(input).name;
    throw Error(fmt::format("{}: the model takes {} inputs ({}), {} were given", graph.source_path,
                            graph.inputs().size(), names, inputs.size()));
  }
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

  reset_run_state();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const ValueId id = graph.inputs()[i];
    values[id] = inputs[i].isTensor() ? c10::IValue(inputs[i].toTensor().to(c10::kCPU)) : inputs[i];
  }

  c10::AutoGradMode no_grad(false);
  {
    std::lock_guard<std::mutex> lock(mutex);
    streams_left = 0;
    for (int stream = 0; stream < plan.stream_count; ++stream) {
      if (stream_nodes[stream].empty()) continue;
      ++streams_left;
      schedule(stream);
    }
    busy = static_cast<int>(threads.size());
    ++generation;
  }
  work_ready.notify_all();
  if (threads.empty()) work();
  {
    std::unique_lock<std::mutex> lock(mutex);
    finished.wait(lock, [this] { return busy == 0; });
  }
  // The no-stream nodes no stream needed: graph outputs made by views, and unused ones.
  for (NodeId id = 0; id < static_cast<NodeId>(graph.size()); ++id) {
    if (plan.stream_of[id] == kNoStream && !ensure(id)) break;
  }

  if (error) {
    values.clear();
    std::rethrow_exception(error);
  }
  std::vector<c10::IValue> outputs;
  outputs.reserve(graph.outputs().size());
  for (ValueId output : graph.outputs()) outputs.push_back(values[output]);
  values.clear();  // hold no tensors between runs
  return outputs;
}

bool CpuParallelExecutor::State::ensure_inputs_of(NodeId id) {
  // In id order, so each one's own no-stream inputs are done before it: Note [Nodes without a stream].
  for (NodeId ancestor : lazy_ancestors[id]) {
    if (!ensure(ancestor)) return false;
  }
  return true;
}

bool CpuParallelExecutor::State::ensure(NodeId id) {
  LazyNode& node = lazy[id];
  if (node.done.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> lock(node.mutex);
  if (node.done.load(std::memory_order_relaxed)) return true;
  if (aborted.load(std::memory_order_acquire) || !execute(id)) return false;
  node.done.store(true, std::memory_order_release);
  return true;
}

bool CpuParallelExecutor::State::execute(NodeId id, bool may_split) {
  try {
    execute_or_throw(id, may_split);
    return true;
  } catch (...) {
    fail(std::current_exception());
    return false;
  }
}

void CpuParallelExecutor::State::execute_or_throw(NodeId id, bool may_split) {
  const Node& node = graph.node(id);
  std::vector<c10::IValue> stack;
  stack.reserve(std::max(node.inputs.size(), node.outputs.size()));
  for (ValueId input : node.inputs) stack.push_back(values[input]);
  // The clock only where someone reads it: two reads a node are measurable on a model of small nodes.
  const bool timed = splittable[id] || options.on_node_done || record_times.load(std::memory_order_relaxed);
  const auto started = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  const bool split = may_split && splittable[id] && run_split(id, stack);
  if (!split) run_node(graph, id, *ops[id], stack);
  if (timed) {
    const auto ended = std::chrono::steady_clock::now();
    const double took_us = std::chrono::duration<double, std::micro>(ended - started).count();
    node_us[id].store(took_us, std::memory_order_relaxed);
    if (!split && splittable[id]) last_run_us[id].store(took_us, std::memory_order_relaxed);
    if (options.on_node_done) options.on_node_done(id, started, ended);
  }
  for (std::size_t i = 0; i < node.outputs.size(); ++i) {
    const ValueId output = node.outputs[i];
    // An output nobody reads is dropped at once, as EagerExecutor does.
    if (reader_count[output] > 0 || pinned[output]) values[output] = std::move(stack[i]);
  }
  stack.clear();
  // Free what this node read for the last time: Note [Publication of values].
  for (std::size_t k = 0; k < node.inputs.size(); ++k) {
    const ValueId input = node.inputs[k];
    // Value::users lists a node once even when it reads the value twice.
    if (std::find(node.inputs.begin(), node.inputs.begin() + k, input) != node.inputs.begin() + k) continue;
    if (readers_left[input].fetch_sub(1, std::memory_order_acq_rel) == 1 && !pinned[input])
      values[input] = c10::IValue();
  }
}

bool CpuParallelExecutor::State::run_split(NodeId id, std::vector<c10::IValue>& stack) {
  const int idle = idle_workers.load(std::memory_order_relaxed);
  if (idle == 0 || last_run_us[id].load(std::memory_order_relaxed) < options.split_min_us) return false;
  std::optional<NodeSplit> split;
  try {
    split = split_node(graph, id, stack, std::min(idle + 1, worker_count));
  } catch (const std::exception&) {
    return false;  // a tensor it cannot reason about: the node runs whole, as it would have
  }
  if (!split) return false;
  const int pieces = split->pieces();
  SplitJob job(id, stack, std::move(*split));
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (posted) return false;  // one split at a time
    posted = &job;
    help_wanted.store(true, std::memory_order_relaxed);
  }
  work_ready.notify_all();
  for (int piece = job.next.fetch_add(1); piece < pieces; piece = job.next.fetch_add(1)) run_piece(job, piece);
  {
    std::lock_guard<std::mutex> lock(mutex);
    posted = nullptr;
    help_wanted.store(false, std::memory_order_relaxed);
  }
  // Pieces still running on helpers: they are short, and this worker has nothing else to do.
  while (job.done.load(std::memory_order_acquire) < pieces) std::this_thread::yield();
  if (job.error) std::rethrow_exception(job.error);
  stack.assign(1, job.output.take());
  split_runs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool CpuParallelExecutor::State::pieces_to_claim() const {
  return posted && posted->next.load(std::memory_order_relaxed) < posted->output.split().pieces();
}

bool CpuParallelExecutor::State::help_with_split(std::unique_lock<std::mutex>& lock, std::mt19937_64& random) {
  if (!posted) return false;
  SplitJob& job = *posted;
  const int piece = job.next.fetch_add(1);  // under `mutex`: the job stays posted, and alive
  if (piece >= job.output.split().pieces()) return false;
  lock.unlock();
  jitter(random);
  run_piece(job, piece);  // ends with the last touch of `job`
  lock.lock();
  return true;
}

void CpuParallelExecutor::State::run_piece(SplitJob& job, int piece) {
  try {
    job.output.run_piece(graph, job.node, *ops[job.node], job.inputs, piece);
  } catch (...) {
    std::lock_guard<std::mutex> lock(job.error_mutex);
    if (!job.error) job.error = std::current_exception();
  }
  job.done.fetch_add(1, std::memory_order_acq_rel);
}

void CpuParallelExecutor::State::fail(std::exception_ptr failure) {
  {
    std::lock_guard<std::mutex> lock(error_mutex);
    if (!error) error = std::move(failure);
  }
  aborted.store(true, std::memory_order_release);
}

void CpuParallelExecutor::State::jitter(std::mt19937_64& random) const {
  if (options.jitter_seed == 0) return;
  const auto pause = std::uniform_int_distribution<int>(-10, 50)(random);
  if (pause <= 0) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(pause));
  }
}

CpuParallelExecutor::CpuParallelExecutor(const Graph& graph, Plan plan, CpuExecutorOptions options)
    : state_(std::make_unique<State>(graph, std::move(plan), options)) {}

CpuParallelExecutor::~CpuParallelExecutor() = default;

std::vector<c10::IValue> CpuParallelExecutor::run(const std::vector<c10::IValue>& inputs) {
  return state_->run(inputs);
}

const Plan& CpuParallelExecutor::plan() const {
  return state_->plan;
}

int CpuParallelExecutor::intra_op_threads() const {
  return state_->intra_op_threads;
}

int CpuParallelExecutor::workers() const {
  return state_->worker_count;
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

void CpuParallelExecutor::set_priorities(std::vector<double> priorities) {
  State& state = *state_;
  require_priorities_fit(state.graph, priorities);
  if (state.in_run.load()) {
    throw Error(fmt::format("{}: set_priorities called during a run; call it between runs", state.graph.source_path));
  }
  std::lock_guard<std::mutex> lock(state.mutex);  // the workers read them under it
  state.options.priorities = std::move(priorities);
}

const std::vector<double>& CpuParallelExecutor::priorities() const {
  return state_->options.priorities;
}

std::size_t CpuParallelExecutor::split_runs() const {
  return state_->split_runs.load(std::memory_order_relaxed);
}

}  // namespace opara
