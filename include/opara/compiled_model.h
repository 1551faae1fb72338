#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "opara/export.h"
#include "opara/graph.h"
#include "opara/options.h"
#include "opara/plan.h"

namespace opara {

// A model compiled for one input signature: the example inputs' count, shapes and dtypes.
//
// run() on CUDA copies the inputs into static buffers, replays the captured graphs (host steps
// between them) on the caller's current stream, and returns the outputs; it does not wait for
// the GPU. Concurrent run() calls on one CompiledModel are serialized (a mutex, and each run's
// stream waits for the previous run's work), so they never overwrite each other's buffers;
// separate CompiledModels run concurrently. Copies of a CompiledModel share one compiled state.
class OPARA_API CompiledModel {
 public:
  // Throws opara::Error naming the input and what was expected when the count, a shape, a dtype
  // or a device differs from the example inputs; nothing is reshaped or moved silently.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;

  // When one node of a traced run ran: on which stream of plan(), from when to when.
  struct NodeSpan {
    NodeId node = kNoNode;
    int stream = 0;
    std::chrono::steady_clock::time_point start;
    std::chrono::steady_clock::time_point end;
  };
  // CPU: run() once, as it always runs (the schedule, streams and threads compile() chose), saying
  // when each node ran, in `spans` (opara-bench trace). Throws opara::Error on CUDA, where the
  // nodes run inside CUDA graphs: trace their kernels with CUPTI instead.
  std::vector<at::Tensor> run_traced(const std::vector<at::Tensor>& inputs, std::vector<NodeSpan>& spans) const;

  // The schedule over the whole graph: with host steps, nodes in them have kNoStream and the
  // dependencies between segments are kept by the segment order rather than by events.
  [[nodiscard]] const Plan& plan() const;
  [[nodiscard]] CompiledStats stats() const;
  [[nodiscard]] const Graph& graph() const;
  // Per node: true when it runs in a host step.
  [[nodiscard]] const std::vector<bool>& host_nodes() const;
  // The inputs read (and written) where they are, ascending: Options::static_inputs and, with
  // Options::state_in_place, every input the model writes in place. run() must be given these
  // very tensors again.
  [[nodiscard]] const std::vector<int>& static_inputs() const;
  // A static input the model writes (a KV cache), given as a new tensor of the same shape,
  // strides, dtype and device once the caller has dropped the one the model was compiled on (a new
  // cache per request): its values move into the compiled-on memory and the new tensor is made to
  // share it (Tensor::set_), so no compile is needed. run() does this itself; true when every
  // such input is (now) the compiled-on tensor, false when one's old memory is still held by the
  // caller (compile again).
  bool adopt_state(const std::vector<at::Tensor>& inputs) const;
  // The buffers the model keeps between runs and writes in place (a counter, a cache registered
  // on the module: Graph::state()), by name: the live tensors on the model's device, first the
  // values the model file saved. Read them after a run (on CUDA, once the caller's stream is
  // done); copy_ into them between runs to set the state.
  [[nodiscard]] std::vector<std::pair<std::string, at::Tensor>> state() const;

  struct State;
  explicit CompiledModel(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

// Loads a model file (.pt or .pt2), plans it and compiles it for the example inputs' signature.
OPARA_API CompiledModel compile(const std::string& path, const std::vector<at::Tensor>& example_inputs,
                                const Options& options = {});
OPARA_API CompiledModel compile(const Graph& graph, const std::vector<at::Tensor>& example_inputs,
                                const Options& options = {});

// The intra-op threads each host worker of a CPU model compiled with `options` runs its nodes with,
// when its plan has `streams` streams and no tuning chooses (one stream never is tuned).
OPARA_API int cpu_worker_threads(const Options& options, int streams);

}  // namespace opara
