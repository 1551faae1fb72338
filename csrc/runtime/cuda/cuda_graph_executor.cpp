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
#include "runtime/cuda/capture_actions.h"
#include "runtime/cuda/capture_lifecycle.h"
#include "runtime/cuda/cuda_graph_compat.h"
#include "runtime/cuda/cuda_streams.h"
#include "support/elapsed.h"

namespace opara {
namespace {

// The actions on CUDA: the lease's streams 0..n-1 are the Plan's, stream n the origin.
class CudaBackend final : public StreamBackend {
 public:
  CudaBackend(const StreamLease& streams, int stream_count, std::size_t node_count, bool record_streams,
              const Graph* capturing = nullptr)
      : streams_(streams),
        origin_(static_cast<int>(streams.size()) - 1),
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
    TORCH_INTERNAL_ASSERT(node_events_[node].has_value(), "opara bug: waiting on node ", node, " before its record");
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
    return streams_[stream == kOriginStream ? origin_ : stream];
  }

  const StreamLease& streams_;
  int origin_;
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

}  // namespace

struct CudaGraphExecutor::State {
  Graph graph;
  Plan plan;
  CudaGraphOptions options;
  c10::DeviceIndex device = 0;
  std::vector<std::shared_ptr<const NodeOp>> ops;
  std::vector<c10::IValue> static_inputs;
  std::vector<c10::IValue> static_outputs;
  std::unique_ptr<InspectableGraph> cuda_graph;
  // Held while the graph lives: cuBLAS keeps a workspace per (handle, stream) and the graph holds
  // the one it was captured with. Another model captured on these streams would share it, and
  // the two replayed at once would race on it.
  std::shared_ptr<StreamLease> streams;
  CaptureStats stats;
};

CudaGraphExecutor::CudaGraphExecutor(const Graph& graph, Plan plan, std::vector<c10::IValue> static_inputs,
                                     CudaGraphOptions options)
    : state_(std::make_unique<State>()) {
  State& state = *state_;
  require_valid(graph, plan);
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
  state.graph = graph;
  state.plan = std::move(plan);
  state.options = options;
  state.static_inputs = std::move(static_inputs);
  state.device = cuda_device_of(graph, state.static_inputs);
  const c10::Device device(c10::kCUDA, state.device);
  c10::cuda::CUDAGuard device_guard(state.device);
  state.ops = ops_on_device(graph, device);

  const std::vector<CaptureAction> actions = capture_actions(state.graph, state.plan);
  const int stream_count = state.plan.stream_count;
  if (options.streams) {
    if (options.streams->size() < static_cast<std::size_t>(stream_count) + 1) {
      throw Error(fmt::format("{}: the plan has {} streams and the capture an origin, but {} streams were lent",
                              graph.source_path, stream_count, options.streams->size()));
    }
    if ((*options.streams)[0].device_index() != state.device) {
      throw Error(fmt::format("{}: the streams lent are on cuda:{}, the inputs on cuda:{}", graph.source_path,
                              (*options.streams)[0].device_index(), state.device));
    }
    state.streams = options.streams;
  } else {
    state.streams = std::make_shared<StreamLease>(state.device, static_cast<std::size_t>(stream_count) + 1);
  }
  StreamLease& streams = *state.streams;
  const std::size_t origin = streams.size() - 1;
  const bool record_streams = options.memory == MemoryProtection::kRecordStream;

  // Warm-up: the same actions, eagerly, on the same streams.
  const auto warmup_started = std::chrono::steady_clock::now();
  // Streams, not the device, are synchronised: a device-wide wait would also wait on (and may
  // invalidate) a capture another thread has under way.
  c10::cuda::getCurrentCUDAStream(state.device).synchronize();  // the static inputs were written there
  for (int round = 0; round < options.warmup_runs; ++round) {
    CudaBackend backend(streams, stream_count, state.graph.size(), record_streams);
    // Its tensors are freed when the round is done (kKeepAlive records no stream use).
    const ActionRun round_run =
        run_actions(state.graph, state.ops, actions, state.static_inputs, backend, options.memory);
    for (std::size_t k = 0; k < streams.size(); ++k) streams[k].synchronize();
  }
  state.stats.warmup_ms = milliseconds_since(warmup_started);

  // Capture on the origin stream (never the default stream).
  const auto capture_started = std::chrono::steady_clock::now();
  const std::size_t reserved_before = reserved_bytes(state.device);
  auto capture = std::make_unique<InspectableGraph>(/*keep_graph=*/true);  // kept to count its nodes
  // An explicit pool, even a graph's own, so that a failed capture can let go of it.
  const c10::MempoolId_t pool = options.pool.first != 0 || options.pool.second != 0
                                    ? c10::MempoolId_t{options.pool.first, options.pool.second}
                                    : at::cuda::graph_pool_handle();
  {
    c10::cuda::CUDAStreamGuard origin_guard(streams[origin]);
    std::unique_lock<std::mutex> turn;
    try {
      turn = begin_capture(*capture, pool, state.device, streams[origin].stream());
    } catch (...) {
      streams.discard();
      throw;
    }
    ActionRun run;
    bool ending = false;
    std::optional<CudaBackend> backend;
    try {
      backend.emplace(streams, stream_count, state.graph.size(), record_streams, &state.graph);
      run = run_actions(state.graph, state.ops, actions, state.static_inputs, *backend, options.memory);
      ending = true;
      capture->capture_end();
    } catch (...) {
      // End the broken capture with every side stream joined, and never lend its streams again.
      if (backend) backend->join_open_streams();
      if (!ending) {
        try {
          capture->capture_end();
        } catch (const std::exception&) {
        }
      }
      abandon_capture(*capture, state.device, pool, streams[origin].stream());
      streams.discard();
      capture.reset();
      try {
        throw;
      } catch (const NodeError& error) {
        // The node ran in the warm-up, so capture is what it cannot stand.
        throw CaptureError(fmt::format("{} (while capturing the CUDA graph: the operation synchronises with the "
                                       "host or has a data-dependent shape; run it as a host step)",
                                       error.what()),
                           error.node());
      }
    }
    state.cuda_graph = std::move(capture);
    C10_CUDA_CHECK(cudaGraphGetNodes(state.cuda_graph->raw_cuda_graph(), nullptr, &state.stats.graph_nodes));
    state.cuda_graph->instantiate();
    state.static_outputs = std::move(run.outputs);
    // run.kept (kKeepAlive) is released here, after the capture ended.
  }
  state.stats.capture_ms = milliseconds_since(capture_started);
  const std::size_t reserved_after = reserved_bytes(state.device);
  state.stats.pool_bytes = reserved_after > reserved_before ? reserved_after - reserved_before : 0;
  state.stats.streams = stream_count;
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
