#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "exec/eager_executor.h"
#include "opara/options.h"
#include "opara/placement.h"
#include "overflow/segments.h"
#include "runtime/cuda/capture_pool.h"
#include "runtime/cuda/cuda_event.h"
#include "runtime/cuda/cuda_graph_executor.h"
#include "runtime/cuda/host_step.h"
#include "runtime/cuda/stream_lease.h"

namespace opara {

// A model on one CUDA device as graph segments, each a captured parallel CUDA graph, with host
// steps between them; all graphs share one memory pool and replay in capture order. Every value
// a later segment reads lives at a fixed address (a slot): graph outputs in the pool, host-step
// results copied into buffers of their own. When a host step's result no longer fits what the
// later graphs were captured with (another shape, another scalar), the rest of that run goes
// eagerly, node by node, and the run still gives the right outputs.
//
// With `overlap`, host steps run on a stream of their own and the graph work a step does not
// depend on is launched after the step's inputs are queued for it (HostOverlap::kSplit), so the
// GPU works while the host does; a step holding a kCpu node runs all its nodes on the CPU
// (HostStep). Without, host steps run eagerly on the device, in order with the graphs.
//
// A 0-dim CPU tensor among the inputs (a Python float under torch.compile) stays on the CPU: a
// graph that reads it holds the value it was captured with, so a run given another value goes
// eagerly, node by node, with the same results.
class CudaModel {
 public:
  // Every graph captures into `pool` (on its device) on its streams. `read_in_place`: the indices
  // of the inputs read (and written) where the caller's tensors are (Options::static_inputs, the
  // state buffers, state_in_place caches). Throws CaptureError for a node that fails capture: the
  // caller makes it a host node and compiles again.
  CudaModel(const Graph& graph, const std::vector<Placement>& placement, bool overlap,
            const std::vector<NodeCost>& costs, const std::vector<at::Tensor>& example_inputs,
            const std::vector<int>& read_in_place, const PlanOptions& plan_options, const CudaOptions& options,
            std::shared_ptr<CapturePool> pool);
  // Waits for the last run: its buffers go back to the allocator.
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  // Runs `run` on the current stream in this model's turn on its pool (CapturePool::run_in_turn):
  // after the work of the last run of every model capturing into it, this one's included.
  void run_in_turn(const std::function<void()>& run) { pool_->run_in_turn(run); }
  // On the current stream, in the caller's run_in_turn: the turn orders this run after the last one
  // of every model in the pool, on any stream (this model keeps no order of its own). The outputs,
  // flattened, are the model's own buffers unless `clone_outputs`: then copies, made before the
  // turn ends.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs, bool clone_outputs);

  [[nodiscard]] const Plan& plan() const { return whole_plan_; }
  // Fills the CUDA fields of `stats`.
  void add_stats(CompiledStats& stats) const;
  [[nodiscard]] std::size_t eager_fallbacks() const { return eager_fallbacks_; }
  // Milliseconds the host steps took, all runs together.
  [[nodiscard]] double host_busy_ms() const;

 private:
  // The caller's inputs as the graphs read them: static ones where they are, the others copied
  // into buffers of the model's own.
  void bind_inputs(const std::vector<at::Tensor>& example_inputs, const std::vector<int>& read_in_place);
  // Segment `k` captured (a graph) or run once (a host step), its outputs put in their slots.
  void compile_segment(std::size_t k, const std::vector<Placement>& placement, const std::vector<NodeCost>& costs,
                       const PlanOptions& plan_options, const CudaOptions& options,
                       const std::optional<c10::cuda::CUDAStream>& step_stream);
  // A captured segment's plan, in the whole graph's node ids, added to whole_plan_.
  void add_to_whole_plan(const Segment& segment, const Plan& local);
  // The graphs from `k` on that a host step's launch overlaps, replayed; the step's results put in
  // their slots. False when a result no longer fits what later graphs were captured with: then
  // `outputs` holds the run's outputs, computed eagerly from there.
  bool run_host_step(std::size_t k, std::optional<std::size_t>& during, const c10::cuda::CUDAStream& stream,
                     std::vector<c10::IValue>& outputs);
  // Segments `first` on, node by node on the current stream, from `values` (by whole-graph value):
  // the graphs were captured for other values. Returns the graph's outputs.
  std::vector<c10::IValue> run_eagerly_from(std::size_t first, std::vector<c10::IValue> values);
  // The input of a CPU scalar the graphs were captured with that now holds another value, if any.
  [[nodiscard]] std::optional<std::size_t> changed_scalar() const;

  const Graph& graph_;
  c10::Device device_;
  std::shared_ptr<CapturePool> pool_;  // every graph's memory and capture streams
  std::vector<Segment> segments_;
  std::vector<std::unique_ptr<CudaGraphExecutor>> graphs_;  // by segment; null for host steps
  std::vector<std::unique_ptr<HostStep>> host_steps_;       // by segment; null for graphs
  std::vector<std::unique_ptr<EagerExecutor>> eager_;       // by segment: fallbacks, made on demand
  std::vector<c10::IValue> slots_;                          // by whole-graph value
  // By input: what the graphs read it from: the caller's tensor when read in place, else a buffer
  // of the model's own that each run copies the input into.
  std::vector<at::Tensor> input_buffers_;
  // By whole-graph value: an input of a captured segment (a CPU tensor there is baked in).
  std::vector<bool> read_by_a_graph_;
  std::vector<bool> written_inputs_;  // by input: the model writes it in place (copied back after each run)
  std::vector<bool> read_in_place_;   // by input: a static input, read from the caller's tensor
  // By input: for a CPU scalar a captured graph reads, its value then (the graph holds it baked in).
  std::vector<at::Tensor> captured_scalars_;
  bool warned_scalar_ = false;
  std::optional<CudaEvent> last_run_;        // what the destructor waits for
  std::unique_ptr<StreamLease> step_lease_;  // the host steps' stream, with overlap
  Plan whole_plan_;
  std::size_t eager_fallbacks_ = 0;
};

}  // namespace opara
