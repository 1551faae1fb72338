#include "runtime/cuda/cuda_model.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "exec/node_op.h"
#include "exec/outputs.h"
#include "exec/own_buffers.h"
#include "exec/undo_writes.h"
#include "graph/graph_analysis.h"
#include "opara/error.h"
#include "overflow/cpu_steps.h"
#include "overflow/placements.h"
#include "runtime/cuda/host_results.h"

namespace opara {
namespace {

std::vector<NodeCost> segment_costs(const Segment& segment, const std::vector<NodeCost>& costs) {
  if (costs.empty()) return {};
  std::vector<NodeCost> local;
  local.reserve(segment.nodes.size());
  for (NodeId node : segment.nodes) local.push_back(costs[node]);
  return local;
}

}  // namespace

CudaModel::CudaModel(const Graph& graph, const std::vector<Placement>& placement, bool overlap,
                     const std::vector<NodeCost>& costs, const std::vector<at::Tensor>& example_inputs,
                     const std::vector<int>& read_in_place, const PlanOptions& plan_options, const CudaOptions& options,
                     std::shared_ptr<CapturePool> pool)
    : graph_(graph), device_(c10::kCUDA, pool->device()), pool_(std::move(pool)) {
  c10::cuda::CUDAGuard device_guard(device_);
  // In the caller's mode: under torch.inference_mode() the caller's state may be inference
  // tensors, which only inference mode may write. Buffers of the model's own are made as
  // ordinary tensors (made_as_own_buffers).
  segments_ = split_segments(graph, host_mask(placement), overlap ? HostOverlap::kSplit : HostOverlap::kNone);
  graphs_.resize(segments_.size());
  host_steps_.resize(segments_.size());
  eager_.resize(segments_.size());
  std::optional<c10::cuda::CUDAStream> step_stream;
  if (overlap) {
    // A stream of our own: c10's pool goes round 32 streams and can hand out the caller's, which
    // would quietly serialise the host steps with the graphs.
    step_lease_ = std::make_unique<StreamLease>(device_.index(), 1);
    step_stream = (*step_lease_)[0];
  }
  bind_inputs(example_inputs, read_in_place);
  whole_plan_.stream_policy = plan_options.streams;
  whole_plan_.order_policy = plan_options.order;
  whole_plan_.max_streams = plan_options.max_streams;
  whole_plan_.stream_of.assign(graph.size(), kNoStream);
  whole_plan_.waits.assign(graph.size(), {});
  whole_plan_.records.assign(graph.size(), 0);
  read_by_a_graph_.assign(graph.values().size(), false);
  for (const Segment& segment : segments_) {
    if (segment.kind != SegmentKind::kGraph) continue;
    for (ValueId value : segment.input_values) read_by_a_graph_[value] = true;
  }
  // Every graph captures into the one pool, on its streams: they replay in capture order, one after
  // another on the caller's stream, so a later graph may reuse what an earlier one freed.
  for (std::size_t k = 0; k < segments_.size(); ++k) {
    compile_segment(k, placement, costs, plan_options, options, step_stream);
  }
  captured_scalars_.resize(example_inputs.size());
  for (std::size_t i = 0; i < example_inputs.size(); ++i) {
    if (input_buffers_[i].is_cpu() && read_by_a_graph_[graph.inputs()[i]])
      captured_scalars_[i] = example_inputs[i].clone();
  }
  // The current stream and the step stream, not the device: see CudaGraphExecutor's warm-up.
  c10::cuda::getCurrentCUDAStream(device_.index()).synchronize();
  if (step_stream) step_stream->synchronize();
}

void CudaModel::bind_inputs(const std::vector<at::Tensor>& example_inputs, const std::vector<int>& read_in_place) {
  slots_.resize(graph_.values().size());
  written_inputs_ = inputs_written_in_place(graph_);
  read_in_place_.assign(example_inputs.size(), false);
  for (int index : read_in_place) read_in_place_.at(index) = true;
  for (std::size_t i = 0; i < example_inputs.size(); ++i) {
    // A static input is read where it is: its buffer is the caller's tensor (run() checks it is
    // given again), every other input a buffer of the model's own, refilled each run.
    input_buffers_.push_back(read_in_place_[i] ? example_inputs[i] : own_copy(example_inputs[i]));
    slots_[graph_.inputs()[i]] = input_buffers_.back();
  }
}

void CudaModel::compile_segment(std::size_t k, const std::vector<Placement>& placement,
                                const std::vector<NodeCost>& costs, const PlanOptions& plan_options,
                                const CudaOptions& options, const std::optional<c10::cuda::CUDAStream>& step_stream) {
  const Segment& segment = segments_[k];
  std::vector<c10::IValue> inputs;
  for (ValueId value : segment.input_values) inputs.push_back(slots_[value]);
  std::vector<c10::IValue> outputs;
  if (segment.kind == SegmentKind::kGraph) {
    const UndoWrites warm_up_writes(inputs, inputs_written_in_place(segment.graph));
    try {
      Plan plan = make_plan(segment.graph, plan_options, segment_costs(segment, costs));
      graphs_[k] = std::make_unique<CudaGraphExecutor>(segment.graph, std::move(plan), inputs,
                                                       CudaGraphOptions{options.memory, options.warmup_runs, pool_});
    } catch (const CaptureError& error) {
      throw CaptureError(error.what(), segment.nodes[error.node()]);  // the whole graph's id
    }
    // Capture computes nothing: one replay fills the static outputs, so that the host steps
    // after it see real values (a nonzero's shape, an item's scalar) when they first run; it
    // starts from the values as the warm-up found them.
    warm_up_writes.undo();
    graphs_[k]->replay();
    outputs = graphs_[k]->static_outputs();
    add_to_whole_plan(segment, graphs_[k]->plan());
  } else {
    host_steps_[k] = std::make_unique<HostStep>(
        segment, device_, step_runs_on_cpu(graph_, segment, placement) ? HostSide::kCpu : HostSide::kDevice,
        segment_costs(segment, costs), step_stream);
    // Later graphs read these at fixed addresses: buffers of their own, refilled each run.
    outputs = host_steps_[k]->first_run(inputs);
    whole_plan_.launch_order.insert(whole_plan_.launch_order.end(), segment.nodes.begin(), segment.nodes.end());
  }
  for (std::size_t j = 0; j < outputs.size(); ++j) slots_[segment.output_values[j]] = outputs[j];
}

void CudaModel::add_to_whole_plan(const Segment& segment, const Plan& local) {
  whole_plan_.stream_count = std::max(whole_plan_.stream_count, local.stream_count);
  whole_plan_.events_unreduced += local.events_unreduced;
  whole_plan_.cost_source = local.cost_source;
  for (NodeId id : local.launch_order) whole_plan_.launch_order.push_back(segment.nodes[id]);
  for (std::size_t i = 0; i < segment.nodes.size(); ++i) {
    const NodeId whole = segment.nodes[i];
    whole_plan_.stream_of[whole] = local.stream_of[i];
    whole_plan_.records[whole] = local.records[i];
    for (NodeId waited : local.waits[i]) whole_plan_.waits[whole].push_back(segment.nodes[waited]);
  }
}

std::optional<std::size_t> CudaModel::changed_scalar() const {
  for (std::size_t i = 0; i < captured_scalars_.size(); ++i) {
    if (captured_scalars_[i].defined() && !at::equal(input_buffers_[i], captured_scalars_[i])) return i;
  }
  return std::nullopt;
}

CudaModel::~CudaModel() {
  // The buffers were allocated on the compile-time stream; a replay may still use them.
  try {
    if (last_run_) last_run_->synchronize();
  } catch (const std::exception& error) {
    TORCH_WARN("opara: waiting for the last run before freeing its buffers failed: ", error.what());
  }
}

std::vector<at::Tensor> CudaModel::run(const std::vector<at::Tensor>& inputs, bool clone_outputs) {
  c10::cuda::CUDAGuard device_guard(device_);
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device_.index());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!read_in_place_[i]) input_buffers_[i].copy_(inputs[i], /*non_blocking=*/true);
  }

  std::vector<c10::IValue> outputs;
  bool eager = false;
  if (const std::optional<std::size_t> changed = changed_scalar()) {
    if (!warned_scalar_) {
      TORCH_WARN("opara: ", graph_.source_path, ": input ", *changed, " ('",
                 graph_.value(graph_.inputs()[*changed]).name,
                 "'), a CPU scalar, holds another value than the CUDA graphs were captured with (they hold it "
                 "as a constant), so this call runs eagerly, as will every call with another value; compile "
                 "once per value to keep such calls in the graphs (torch.compile: "
                 "torch._dynamo.config.specialize_float = True)");
      warned_scalar_ = true;
    }
    ++eager_fallbacks_;
    eager = true;
    outputs = run_eagerly_from(0, slots_);
  }
  std::optional<std::size_t> during;  // a graph launched once the next host step's inputs are queued
  for (std::size_t k = 0; k < segments_.size() && !eager; ++k) {
    if (!graphs_[k]) {
      eager = !run_host_step(k, during, stream, outputs);
    } else if (segments_[k].during_next_host_step) {
      during = k;
    } else {
      graphs_[k]->replay();
    }
  }
  if (!eager) {
    for (ValueId output : graph_.outputs()) outputs.push_back(slots_[output]);
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    // As eager PyTorch does: the caller's tensor takes the model's in-place writes (state read in
    // place took them where it lives).
    if (written_inputs_[i] && !read_in_place_[i]) inputs[i].copy_(input_buffers_[i], /*non_blocking=*/true);
  }
  std::vector<at::Tensor> tensors = flatten_tensors(outputs);
  if (clone_outputs) {
    // In the turn: the next run, perhaps on another stream, waits for its end before overwriting
    // the buffers these copies read.
    for (at::Tensor& tensor : tensors) tensor = tensor.clone();
  }
  if (!last_run_) last_run_.emplace();
  last_run_->record(stream);
  return tensors;
}

bool CudaModel::run_host_step(std::size_t k, std::optional<std::size_t>& during, const c10::cuda::CUDAStream& stream,
                              std::vector<c10::IValue>& outputs) {
  const Segment& segment = segments_[k];
  HostStep& step = *host_steps_[k];
  std::vector<c10::IValue> step_inputs;
  for (ValueId value : segment.input_values) step_inputs.push_back(slots_[value]);
  step.start(step_inputs, stream);
  if (during) graphs_[*during]->replay();
  during.reset();
  std::vector<c10::IValue> results = step.finish();
  std::vector<c10::IValue> step_slots;
  bool all_fit = true;
  for (std::size_t j = 0; j < results.size(); ++j) {
    const ValueId value = segment.output_values[j];
    step_slots.push_back(slots_[value]);
    all_fit = all_fit && result_fits(step_slots.back(), results[j], read_by_a_graph_[value]);
  }
  if (all_fit) {
    step.publish(results, step_slots, stream);
    return true;
  }
  ++eager_fallbacks_;
  step.join(stream);
  // Made on the step's stream, read on this one from now on: not to be reused before it is done.
  for (const at::Tensor& tensor : flatten_tensors(results)) {
    if (tensor.is_cuda()) tensor.record_stream(stream);
  }
  std::vector<c10::IValue> values = slots_;
  for (std::size_t j = 0; j < results.size(); ++j) {
    // Where the model has the value (its slot): a result the model keeps on the CPU stays there.
    const ValueId value = segment.output_values[j];
    values[value] = holds_cuda_tensors(values[value]) ? move_tensors(results[j], device_) : results[j];
  }
  outputs = run_eagerly_from(k + 1, std::move(values));
  return false;
}

std::vector<c10::IValue> CudaModel::run_eagerly_from(std::size_t first, std::vector<c10::IValue> values) {
  for (std::size_t k = first; k < segments_.size(); ++k) {
    const Segment& segment = segments_[k];
    if (!eager_[k]) eager_[k] = std::make_unique<EagerExecutor>(segment.graph, device_);
    std::vector<c10::IValue> inputs;
    for (ValueId value : segment.input_values) inputs.push_back(values[value]);
    std::vector<c10::IValue> results = eager_[k]->run(inputs);
    for (std::size_t j = 0; j < results.size(); ++j) values[segment.output_values[j]] = std::move(results[j]);
  }
  std::vector<c10::IValue> outputs;
  for (ValueId output : graph_.outputs()) outputs.push_back(values[output]);
  return outputs;
}

double CudaModel::host_busy_ms() const {
  double total = 0;
  for (const auto& step : host_steps_) total += step ? step->busy_ms() : 0;
  return total;
}

void CudaModel::add_stats(CompiledStats& stats) const {
  stats.segments = segments_.size();
  for (std::size_t k = 0; k < segments_.size(); ++k) {
    if (host_steps_[k]) {
      stats.host_nodes += segments_[k].nodes.size();
      if (host_steps_[k]->side() == HostSide::kCpu) stats.cpu_nodes += segments_[k].nodes.size();
      stats.bytes_to_host += host_steps_[k]->bytes_to_host();
      stats.bytes_to_device += host_steps_[k]->bytes_to_device();
      continue;
    }
    const CaptureStats& capture = graphs_[k]->stats();
    stats.streams = std::max(stats.streams, capture.streams);
    stats.events += capture.events;
    stats.captured_nodes += capture.captured_nodes;
    stats.graph_nodes += capture.graph_nodes;
    stats.capture_ms += capture.capture_ms;
    stats.pool_bytes += capture.pool_bytes;
  }
  stats.eager_fallbacks = eager_fallbacks_;
  stats.workspace_bytes = pool_->workspace_bytes();
}

}  // namespace opara
