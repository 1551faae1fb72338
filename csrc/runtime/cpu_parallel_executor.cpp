// Runs a Plan on the CPU, one host thread per stream.
//
// Each stream of the plan becomes a worker that follows its nodes in launch order: before a node
// it waits on the latches of the nodes in `plan.waits[node]`, runs the node, and releases the
// node's own latch when `plan.records[node]`. Workers are threads started once, in the
// constructor, and woken for each run; the calling thread of run() plays stream 0 itself when its
// intra-op thread count is the workers' (saving a hand-off), else stream 0's worker does.
//
//   stream 0:  a ---------> c ---- d          plan: a, b on different streams, c waits on b's
//   stream 1:  b --(latch b)-^                      event: c's worker blocks on b's latch.
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
// runs its producer, and read by consumers that are ordered after the producer by one of: running
// on the same thread later, a latch (release on set, acquire on wait), a no-stream node's done flag
// (release/acquire, or its mutex), or the end-of-run handshake with the calling thread. A slot is
// cleared (the value freed) by the consumer that decrements its atomic count of readers to zero
// (acq_rel): every other reader decremented after copying it out, so the clear comes after every
// read. Graph inputs and outputs are never cleared during a run.
#include "opara/cpu_parallel_executor.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <random>
#include <thread>

#include "../import/import_errors.h"
#include "node_op.h"
#include "opara/error.h"

namespace opara {
namespace {

// A one-shot event: released once per run by the node that records it, waited on by nodes of
// other streams. Waiters spin a little (most waits are short), then sleep on the condition variable.
class Latch {
 public:
  void wait() {
    // Most waits are for a node that finishes within tens of microseconds; sleeping on the
    // condition variable costs about as much again, so spin (yielding the core) for a while first.
    const auto give_up = std::chrono::steady_clock::now() + kSpinFor;
    for (int spin = 0;; ++spin) {
      if (set_.load(std::memory_order_acquire)) return;
      if (spin % 64 == 63 && std::chrono::steady_clock::now() > give_up) break;
      std::this_thread::yield();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    wakeup_.wait(lock, [this] { return set_.load(std::memory_order_acquire); });
  }

  // Idempotent: an aborted run releases every latch, some of them a second time.
  void release() {
    {
      // Set under the mutex so a waiter between its check and its sleep cannot miss the wakeup.
      std::lock_guard<std::mutex> lock(mutex_);
      set_.store(true, std::memory_order_release);
    }
    wakeup_.notify_all();
  }

  // Only between runs, when no thread waits; the next run's start publishes it.
  void reset() { set_.store(false, std::memory_order_relaxed); }

 private:
  static constexpr std::chrono::microseconds kSpinFor{200};
  std::atomic<bool> set_{false};
  std::mutex mutex_;
  std::condition_variable wakeup_;
};

// Run-once state of a node without a stream (std::once_flag cannot be reset between runs).
struct LazyNode {
  std::atomic<bool> done{false};
  std::mutex mutex;  // held while the node runs: a second thread that needs it waits
};

int default_intra_op_threads(int stream_count) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, stream_count));
}

// Note [Intra-op threads per thread]: with ATen's OpenMP backend, at::set_num_threads() calls
// omp_set_num_threads(), which sets the calling thread's own ICV, and at::get_num_threads()
// returns omp_get_max_threads() of the calling thread: so each worker has its own count. It also
// stores a process-wide value that a thread copies the first time it asks (ATen's lazy
// per-thread initialisation); asking first (get) makes that copy happen before we set ours. And it
// resizes a shared thread pool, which is slow: so counts are set once per worker thread, never per
// run, and the caller plays stream 0 only when its own count already matches.
}  // namespace

struct CpuParallelExecutor::State {
  State(const Graph& g, Plan p, CpuExecutorOptions o);
  ~State();

  std::vector<c10::IValue> run(const std::vector<c10::IValue>& inputs);

  // The work of one stream; never throws (errors go to fail()).
  void run_stream(int stream);
  // Ensures the no-stream nodes `id` needs; false when the run was aborted.
  bool ensure_inputs_of(NodeId id);
  // Runs no-stream node `id` unless some thread has; its own no-stream ancestors must be done.
  bool ensure(NodeId id);
  // Runs one node and publishes its outputs; false (after fail()) when it threw.
  bool execute(NodeId id);
  void execute_or_throw(NodeId id);
  // Keeps the first error, aborts the run and releases every latch so that no worker waits forever.
  void fail(std::exception_ptr error);
  void jitter(int stream);
  void worker_main(int stream);
  void stop_workers() noexcept;
  void reset_run_state();

  // ---- fixed at construction --------------------------------------------------------------
  Graph graph;
  Plan plan;
  CpuExecutorOptions options;
  int intra_op_threads = 1;
  std::vector<std::shared_ptr<const NodeOp>> ops;  // by NodeId
  std::vector<std::vector<NodeId>> stream_nodes;   // by stream, in launch order
  // By NodeId: the no-stream nodes reached backwards through no-stream nodes only, in id order.
  std::vector<std::vector<NodeId>> lazy_ancestors;
  std::vector<std::size_t> reader_count;  // by ValueId: distinct nodes that read it
  std::vector<std::uint8_t> pinned;       // by ValueId: graph inputs and outputs, never freed

  // ---- per run: reset by the calling thread before the workers wake ------------------------
  std::vector<c10::IValue> values;                           // by ValueId; Note [Publication of values]
  std::unique_ptr<std::atomic<std::size_t>[]> readers_left;  // by ValueId
  std::unique_ptr<Latch[]> latches;                          // by NodeId; used for recording nodes
  std::unique_ptr<LazyNode[]> lazy;                          // by NodeId; used for no-stream nodes
  std::atomic<bool> aborted{false};
  std::mutex error_mutex;
  std::exception_ptr error;  // the first failure of the run, guarded by error_mutex

  // ---- workers: guarded by `mutex` ---------------------------------------------------------
  std::mutex mutex;
  std::condition_variable wake;          // workers: a new generation, or stopping
  std::condition_variable finished;      // caller: `busy` reached 0, or a worker started
  std::uint64_t generation = 0;          // bumped once per run
  int busy = 0;                          // workers still inside the current run
  int started = 0;                       // workers that have set up their thread
  bool stopping = false;                 // set once, by the destructor
  std::vector<std::mt19937_64> randoms;  // by stream, for jitter; each touched by its own worker
  std::vector<std::thread> threads;      // stream k is threads[k]
  bool caller_plays_stream_0 = false;    // this run: the caller's intra-op threads match
  std::atomic<bool> in_run{false};
};

CpuParallelExecutor::State::State(const Graph& g, Plan p, CpuExecutorOptions o)
    : graph(g), plan(std::move(p)), options(o) {
  require_valid(graph, plan);
  if (options.intra_op_threads < 0) {
    throw Error(fmt::format("{}: intra_op_threads must be 0 (automatic) or positive, not {}", graph.source_path,
                            options.intra_op_threads));
  }
  intra_op_threads =
      options.intra_op_threads > 0 ? options.intra_op_threads : default_intra_op_threads(plan.stream_count);

  const std::size_t node_count = graph.size();
  ops.reserve(node_count);
  for (const Node& node : graph.nodes()) {
    if (!node.op)
      throw Error(fmt::format("{}: {} has no operation to run", graph.source_path, graph.describe(node.id)));
    ops.push_back(node.op);
  }
  stream_nodes = plan.stream_nodes();

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
  latches = std::make_unique<Latch[]>(node_count);
  lazy = std::make_unique<LazyNode[]>(node_count);

  randoms.reserve(std::max(plan.stream_count, 1));
  for (int stream = 0; stream < std::max(plan.stream_count, 1); ++stream)
    randoms.emplace_back(options.jitter_seed + static_cast<std::uint64_t>(stream));

  // The caller's own count, read before the workers store theirs process-wide (Note [Intra-op
  // threads per thread]); stored back once they have started so later threads are not affected.
  const int caller_threads = at::get_num_threads();
  try {
    for (int stream = 0; stream < plan.stream_count; ++stream)
      threads.emplace_back([this, stream] { worker_main(stream); });
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
  wake.notify_all();
  for (std::thread& thread : threads) thread.join();
  threads.clear();
}

void CpuParallelExecutor::State::worker_main(int stream) {
  // Thread-local settings, kept for the thread's life: Note [Intra-op threads per thread].
  (void)at::get_num_threads();
  at::set_num_threads(intra_op_threads);
  c10::AutoGradMode no_grad(false);  // inference, like EagerExecutor
  std::uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex);
  ++started;
  finished.notify_all();
  for (;;) {
    wake.wait(lock, [&] { return stopping || generation != seen; });
    if (stopping) return;
    seen = generation;
    const bool mine = stream != 0 || !caller_plays_stream_0;
    lock.unlock();
    if (mine) run_stream(stream);
    lock.lock();
    if (--busy == 0) finished.notify_all();
  }
}

void CpuParallelExecutor::State::reset_run_state() {
  values.assign(graph.values().size(), c10::IValue());
  for (std::size_t id = 0; id < reader_count.size(); ++id)
    readers_left[id].store(reader_count[id], std::memory_order_relaxed);
  for (std::size_t id = 0; id < graph.size(); ++id) {
    latches[id].reset();
    lazy[id].done.store(false, std::memory_order_relaxed);
  }
  aborted.store(false, std::memory_order_relaxed);
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
  const bool caller_plays = at::get_num_threads() == intra_op_threads;
  {
    std::lock_guard<std::mutex> lock(mutex);
    caller_plays_stream_0 = caller_plays;
    busy = static_cast<int>(threads.size());
    ++generation;
  }
  wake.notify_all();
  if (plan.stream_count > 0 && caller_plays) run_stream(0);
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

void CpuParallelExecutor::State::run_stream(int stream) {
  for (NodeId id : stream_nodes[stream]) {
    if (aborted.load(std::memory_order_acquire)) return;
    jitter(stream);
    for (NodeId event : plan.waits[id]) latches[event].wait();
    // A failed run releases every latch: a released latch does not mean its node ran.
    if (aborted.load(std::memory_order_acquire)) return;
    if (!ensure_inputs_of(id) || !execute(id)) return;
    if (plan.records[id]) latches[id].release();
  }
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

bool CpuParallelExecutor::State::execute(NodeId id) {
  try {
    execute_or_throw(id);
    return true;
  } catch (...) {
    fail(std::current_exception());
    return false;
  }
}

void CpuParallelExecutor::State::execute_or_throw(NodeId id) {
  const Node& node = graph.node(id);
  std::vector<c10::IValue> stack;
  stack.reserve(std::max(node.inputs.size(), node.outputs.size()));
  for (ValueId input : node.inputs) stack.push_back(values[input]);
  try {
    ops[id]->run(stack);
  } catch (const std::exception& failure) {
    throw Error(fmt::format("{}: {} failed: {}", graph.source_path, graph.describe(id), first_line(failure)));
  }
  TORCH_INTERNAL_ASSERT(stack.size() == node.outputs.size(), "opara bug: ", graph.describe(id), " produced ",
                        stack.size(), " values, the graph expects ", node.outputs.size());
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

void CpuParallelExecutor::State::fail(std::exception_ptr failure) {
  {
    std::lock_guard<std::mutex> lock(error_mutex);
    if (!error) error = std::move(failure);
  }
  aborted.store(true, std::memory_order_release);
  for (std::size_t id = 0; id < graph.size(); ++id) {
    if (plan.records[id]) latches[id].release();
  }
}

void CpuParallelExecutor::State::jitter(int stream) {
  if (options.jitter_seed == 0) return;
  std::mt19937_64& random = randoms[stream];
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

}  // namespace opara
