#include "runtime/cuda/cuda_graph_executor.h"

#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>

#include "exec/node_op.h"
#include "opara/error.h"
#include "runtime/cuda/action_runner.h"
#include "runtime/cuda/capture_pool.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/graph_capture.h"
#include "schedule/capture_actions.h"
#include "support/elapsed.h"
#include "support/internal_assert.h"

namespace opara {
namespace {

// The actions on CUDA, on a capture's streams (CapturePool::capture_streams): the origin first,
// then the Plan's.
class CudaBackend final : public StreamBackend {
 public:
  CudaBackend(const std::vector<c10::cuda::CUDAStream>& streams, int stream_count, std::size_t node_count,
              bool record_streams, const Graph* capturing = nullptr)
      : streams_(streams),
        node_events_(node_count),
        join_events_(stream_count),
        record_streams_(record_streams),
        capturing_(capturing) {}

  void fork(int stream) override {
    if (!fork_event_) {
      fork_event_.emplace();
      fork_event_->record(cuda_stream(kOriginStream));
    }
    fork_event_->block(cuda_stream(stream));
    open_.push_back(stream);
  }
  void join(int stream) override {
    auto& event = join_events_[stream];
    if (!event) event.emplace();
    event->record(cuda_stream(stream));
    event->block(cuda_stream(kOriginStream));
    open_.erase(std::remove(open_.begin(), open_.end(), stream), open_.end());
  }
  // After a failure in the middle of a capture: joins every side stream forked and not yet
  // joined into the origin and makes the origin current again, so that ending the capture takes
  // every stream out of capture mode. A stream left capturing would make the caching allocator's
  // deferred events throw in some later, unrelated allocation on it. Errors are ignored: the
  // capture may be invalidated already, and ending it is what matters.
  void join_open_streams() noexcept {
    for (const int stream : std::vector<int>(open_)) {
      try {
        join(stream);
      } catch (const std::exception&) {
        (void)cudaGetLastError();
      }
    }
    try {
      enter(kOriginStream);
    } catch (const std::exception&) {
    }
  }
  void record(int stream, NodeId node) override {
    auto& event = node_events_[node];
    if (!event) event.emplace();
    event->record(cuda_stream(stream));
  }
  void wait(int stream, NodeId node) override {
    // CUDAEvent::block on an event never recorded is a silent no-op; capture_actions guarantees
    // the record comes first, and this says so loudly if it ever does not.
    OPARA_ASSERT(node_events_[node].has_value(), "waiting on node {} before its record", node);
    node_events_[node]->block(cuda_stream(stream));
  }
  void enter(int stream) override {
    if (guard_) {
      guard_->reset_stream(cuda_stream(stream));
    } else {
      guard_.emplace(cuda_stream(stream));
    }
  }
  void read_on(const at::Tensor& tensor, int stream) override {
    if (record_streams_ && tensor.defined() && tensor.is_cuda()) tensor.record_stream(cuda_stream(stream).unwrap());
  }
  void ran(int stream, NodeId node) override {
    if (!capturing_) return;
    // An op that breaks the capture without an error (it swallowed one, or synchronised a stream
    // another library owns) is named here, not blamed on the next node or on capture_end.
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaError_t asked = cudaStreamIsCapturing(cuda_stream(stream).stream(), &status);
    if (asked != cudaSuccess || status != cudaStreamCaptureStatusActive) {
      (void)cudaGetLastError();
      throw NodeError(
          fmt::format("{}: {} broke the CUDA graph capture ({})", capturing_->source_path, capturing_->describe(node),
                      asked != cudaSuccess ? cudaGetErrorString(asked) : "the capture was invalidated"),
          node);
    }
  }

 private:
  [[nodiscard]] const c10::cuda::CUDAStream& cuda_stream(int stream) const {
    return streams_[stream == kOriginStream ? 0 : static_cast<std::size_t>(stream) + 1];
  }

  const std::vector<c10::cuda::CUDAStream>& streams_;
  std::vector<std::optional<CudaEvent>> node_events_;
  std::vector<std::optional<CudaEvent>> join_events_;
  std::optional<CudaEvent> fork_event_;
  std::optional<c10::cuda::CUDAStreamGuard> guard_;
  std::vector<int> open_;  // side streams forked and not yet joined
  bool record_streams_;
  const Graph* capturing_;  // set while capturing: ran() checks the capture
};

c10::DeviceIndex cuda_device_of(const Graph& graph, const std::vector<c10::IValue>& inputs) {
  std::optional<c10::Device> device;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].isTensor()) continue;
    const at::Tensor& tensor = inputs[i].toTensor();
    const c10::Device here = tensor.device();
    // A CPU scalar (from a host step, say) is an argument the capture bakes in, not device data;
    // the caller replays only while its value stays the captured one (result_fits).
    if (here.is_cpu() && tensor.dim() == 0) continue;
    if (!here.is_cuda()) {
      throw Error(fmt::format("{}: input '{}' is on {}; the CUDA graph needs its inputs on a CUDA device",
                              graph.source_path, graph.value(graph.inputs()[i]).name, here.str()));
    }
    if (device && *device != here) {
      throw Error(fmt::format("{}: inputs on {} and {}: a CUDA graph runs on one device", graph.source_path,
                              device->str(), here.str()));
    }
    device = here;
  }
  return device ? device->index() : c10::cuda::current_device();
}

// Arguments no capture could go on with.
void check_arguments(const Graph& graph, const std::vector<c10::IValue>& static_inputs,
                     const CudaGraphOptions& options) {
  if (static_inputs.size() != graph.inputs().size()) {
    throw Error(fmt::format("{}: the graph takes {} inputs, {} static inputs were given", graph.source_path,
                            graph.inputs().size(), static_inputs.size()));
  }
  // The first run creates cuBLAS and cuDNN handles and workspaces, the second runs as capture will:
  // nothing the graph uses may be made inside its pool.
  if (options.warmup_runs < 2) {
    throw Error(
        fmt::format("{}: warmup_runs must be at least 2, not {}: the first eager run creates the cuBLAS and "
                    "cuDNN handles and workspaces, and capture must find them made",
                    graph.source_path, options.warmup_runs));
  }
  if (options.memory == MemoryProtection::kSmallerPool) {
    throw Error(
        fmt::format("{}: a CudaGraphExecutor captures with one memory protection, record-stream or keep-alive; "
                    "smaller-pool is compile()'s, which captures with both",
                    graph.source_path));
  }
}

}  // namespace

struct CudaGraphExecutor::State {
  Graph graph;
  Plan plan;
  CudaGraphOptions options;
  c10::DeviceIndex device = 0;
  std::vector<std::shared_ptr<const NodeOp>> ops;
  std::vector<c10::IValue> static_inputs;
  std::vector<c10::IValue> static_outputs;
  // Held while the graph lives (declared before it, so released after it): its memory, the
  // streams it was captured on and the cuBLAS workspaces it was captured with (another model
  // captured on them and replayed at once would race on them).
  std::shared_ptr<CapturePool> pool;
  std::unique_ptr<InspectableGraph> cuda_graph;
  CaptureStats stats;

  [[nodiscard]] bool record_streams() const { return options.memory == MemoryProtection::kRecordStream; }
  // The pool lent, on the inputs' device, or one of the graph's own.
  void take_pool();
  // The same actions as capture, eagerly, on the same streams, options.warmup_runs times.
  void warm_up(const std::vector<CaptureAction>& actions, const std::vector<c10::cuda::CUDAStream>& streams);
  // Captures the actions on the origin stream (never the default stream) and instantiates the graph.
  void capture(const std::vector<CaptureAction>& actions, const std::vector<c10::cuda::CUDAStream>& streams);
};

void CudaGraphExecutor::State::take_pool() {
  if (!options.pool) {
    pool = CapturePool::create(device);
    return;
  }
  if (options.pool->device() != device) {
    throw Error(fmt::format("{}: the memory pool lent is on cuda:{}, the inputs on cuda:{}", graph.source_path,
                            options.pool->device(), device));
  }
  pool = options.pool;
}

void CudaGraphExecutor::State::warm_up(const std::vector<CaptureAction>& actions,
                                       const std::vector<c10::cuda::CUDAStream>& streams) {
  const auto started = std::chrono::steady_clock::now();
  // Streams, not the device, are synchronised: a device-wide wait would also wait on (and may
  // invalidate) a capture another thread has under way.
  c10::cuda::getCurrentCUDAStream(device).synchronize();  // the static inputs were written there
  for (int round = 0; round < options.warmup_runs; ++round) {
    CudaBackend backend(streams, plan.stream_count, graph.size(), record_streams());
    // Its tensors are freed when the round is done (kKeepAlive records no stream use).
    const ActionRun round_run = run_actions(graph, ops, actions, static_inputs, backend, options.memory);
    for (const c10::cuda::CUDAStream& stream : streams) stream.synchronize();
  }
  stats.warmup_ms = milliseconds_since(started);
}

void CudaGraphExecutor::State::capture(const std::vector<CaptureAction>& actions,
                                       const std::vector<c10::cuda::CUDAStream>& streams) {
  const auto started = std::chrono::steady_clock::now();
  const std::size_t reserved_before = reserved_bytes(device);
  const c10::cuda::CUDAStreamGuard origin_guard(streams[0]);
  GraphCapture capture(*pool, streams[0].stream());
  CudaBackend backend(streams, plan.stream_count, graph.size(), record_streams(), &graph);
  ActionRun run;
  try {
    run = run_actions(graph, ops, actions, static_inputs, backend, options.memory);
  } catch (const NodeError& error) {
    // End the broken capture with every side stream joined. The node ran in the warm-up, so
    // capture is what it cannot stand.
    backend.join_open_streams();
    capture.abandon();
    throw CaptureError(fmt::format("{} (while capturing the CUDA graph: the operation synchronises with the "
                                   "host or has a data-dependent shape; run it as a host step)",
                                   error.what()),
                       error.node());
  } catch (...) {
    backend.join_open_streams();
    capture.abandon();
    throw;
  }
  cuda_graph = capture.end();
  C10_CUDA_CHECK(cudaGraphGetNodes(cuda_graph->raw_cuda_graph(), nullptr, &stats.graph_nodes));
  cuda_graph->instantiate();
  static_outputs = std::move(run.outputs);
  run.kept.clear();  // kKeepAlive's tensors are released once the capture has ended
  stats.capture_ms = milliseconds_since(started);
  const std::size_t reserved_after = reserved_bytes(device);
  stats.pool_bytes = reserved_after > reserved_before ? reserved_after - reserved_before : 0;
}

CudaGraphExecutor::CudaGraphExecutor(const Graph& graph, Plan plan, std::vector<c10::IValue> static_inputs,
                                     CudaGraphOptions options)
    : state_(std::make_unique<State>()) {
  require_valid(graph, plan);
  check_arguments(graph, static_inputs, options);
  State& state = *state_;
  state.graph = graph;
  state.plan = std::move(plan);
  state.options = std::move(options);
  state.static_inputs = std::move(static_inputs);
  state.device = cuda_device_of(graph, state.static_inputs);
  const c10::cuda::CUDAGuard device_guard(state.device);
  state.ops = ops_on_device(graph, c10::Device(c10::kCUDA, state.device));
  state.take_pool();
  const std::vector<c10::cuda::CUDAStream> streams = state.pool->capture_streams(state.plan.stream_count);
  const std::vector<CaptureAction> actions = capture_actions(state.graph, state.plan);
  {
    const CapturePool::WorkspaceLoan workspaces(*state.pool);
    state.warm_up(actions, streams);
    state.capture(actions, streams);
  }
  state.stats.streams = state.plan.stream_count;
  state.stats.events = state.plan.wait_count();
  for (const Node& node : state.graph.nodes()) state.stats.captured_nodes += node.has(kLaunchesKernel) ? 1 : 0;
}

CudaGraphExecutor::~CudaGraphExecutor() = default;

void CudaGraphExecutor::replay() {
  c10::cuda::CUDAGuard device_guard(state_->device);
  state_->cuda_graph->replay();
}

const std::vector<c10::IValue>& CudaGraphExecutor::static_inputs() const {
  return state_->static_inputs;
}
const std::vector<c10::IValue>& CudaGraphExecutor::static_outputs() const {
  return state_->static_outputs;
}
const Plan& CudaGraphExecutor::plan() const {
  return state_->plan;
}
const CaptureStats& CudaGraphExecutor::stats() const {
  return state_->stats;
}

}  // namespace opara
