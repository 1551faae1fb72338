#include "runtime/cuda/host_step.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <chrono>

#include "exec/node_op.h"
#include "exec/outputs.h"
#include "exec/own_buffers.h"
#include "exec/undo_writes.h"
#include "graph/graph_analysis.h"
#include "opara/plan.h"
#include "runtime/cuda/host_results.h"
#include "support/elapsed.h"

namespace opara {
namespace {

// An empty pinned host tensor like `tensor` (same sizes, dtype and, for dense tensors, strides):
// a staging buffer every run copies through.
at::Tensor pinned_like(const at::Tensor& tensor) {
  const at::TensorOptions options = tensor.options().device(c10::kCPU).pinned_memory(true);
  return made_as_own_buffers([&] {
    if (tensor.is_non_overlapping_and_dense()) return at::empty_strided(tensor.sizes(), tensor.strides(), options);
    return at::empty(tensor.sizes(), options);
  });
}

bool same_shape(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type();
}

}  // namespace

HostStep::HostStep(const Segment& segment, c10::Device device, HostSide side, const std::vector<NodeCost>& costs,
                   std::optional<c10::cuda::CUDAStream> stream)
    : graph_(&segment.graph), device_(device), side_(side), own_stream_(stream) {
  if (side == HostSide::kDevice) {
    eager_ = std::make_unique<EagerExecutor>(segment.graph, device);
  } else {
    Plan plan = make_plan(segment.graph, {StreamPolicy::kOpara, OrderPolicy::kOpara, 0}, costs);
    cpu_ = std::make_unique<CpuParallelExecutor>(segment.graph, std::move(plan));
  }
  pinned_inputs_.resize(segment.input_values.size());
  pinned_results_.resize(segment.output_values.size());
}

std::vector<c10::IValue> HostStep::first_run(const std::vector<c10::IValue>& inputs) {
  if (side_ == HostSide::kDevice) {
    std::vector<c10::IValue> results = eager_->run(inputs);
    for (c10::IValue& result : results) {
      result = made_as_own_buffers([&] { return clone_tensors(result); });  // the slots: buffers of their own
    }
    return results;
  }
  std::vector<c10::IValue> cpu_inputs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    cpu_inputs.push_back(move_tensors(inputs[i], c10::kCPU));
    if (inputs[i].isTensor() && inputs[i].toTensor().is_cuda()) {
      pinned_inputs_[i] = pinned_like(inputs[i].toTensor());
      bytes_to_host_ += inputs[i].toTensor().nbytes();
    }
  }
  std::vector<c10::IValue> results = cpu_->run(cpu_inputs);
  // Each result goes where the model has it: one eager run of the step on the device tells (a
  // result the model moves to the CPU itself stays there). The device values it writes are put back.
  const UndoWrites reference_writes(inputs, inputs_written_in_place(*graph_));
  const std::vector<c10::IValue> reference = EagerExecutor(*graph_, device_).run(inputs);
  reference_writes.undo();
  for (std::size_t j = 0; j < results.size(); ++j) {
    const bool on_device = holds_cuda_tensors(reference[j]);
    if (results[j].isTensor() && results[j].toTensor().is_cpu() && on_device) {
      const at::Tensor& result = results[j].toTensor();
      pinned_results_[j] = pinned_like(result);
      bytes_to_device_ += result.nbytes();
      results[j] = made_as_own_buffers([&] { return result.to(device_, /*non_blocking=*/false, /*copy=*/true); });
    } else if (results[j].isTensor()) {
      results[j] = own_copy(results[j].toTensor());
    } else if (on_device) {
      results[j] =
          made_as_own_buffers([&] { return move_tensors(results[j], device_); });  // a list or tuple: read as it is
    }
  }
  return results;
}

void HostStep::start(const std::vector<c10::IValue>& inputs, const c10::cuda::CUDAStream& main) {
  main_ = main;
  const c10::cuda::CUDAStream& stream = step_stream(main);
  if (own_stream_) {
    main_ready_.record(main);
    main_ready_.block(stream);
  }
  if (side_ == HostSide::kDevice) {
    staged_ = inputs;
    return;
  }
  const c10::cuda::CUDAStreamGuard guard(stream);
  staged_.assign(inputs.size(), c10::IValue());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const c10::IValue& input = inputs[i];
    if (input.isTensor() && pinned_inputs_[i].defined() && same_shape(pinned_inputs_[i], input.toTensor())) {
      pinned_inputs_[i].copy_(input.toTensor(), /*non_blocking=*/true);
      staged_[i] = pinned_inputs_[i];
    } else {
      staged_[i] = move_tensors(input, c10::kCPU);  // no buffer for it: a synchronous copy
    }
  }
  staged_event_.record(stream);
}

std::vector<c10::IValue> HostStep::finish() {
  const auto started = std::chrono::steady_clock::now();
  std::vector<c10::IValue> results;
  if (side_ == HostSide::kDevice) {
    const c10::cuda::CUDAStreamGuard guard(step_stream(*main_));
    results = eager_->run(staged_);
  } else {
    staged_event_.synchronize();
    results = cpu_->run(staged_);
  }
  staged_.clear();
  busy_ms_ += milliseconds_since(started);
  return results;
}

void HostStep::publish(const std::vector<c10::IValue>& results, const std::vector<c10::IValue>& slots,
                       const c10::cuda::CUDAStream& main) {
  const c10::cuda::CUDAStream& stream = step_stream(main);
  {
    const c10::cuda::CUDAStreamGuard guard(stream);
    for (std::size_t j = 0; j < results.size(); ++j) {
      const bool pinned = results[j].isTensor() && results[j].toTensor().is_cpu() && pinned_results_[j].defined() &&
                          same_shape(pinned_results_[j], results[j].toTensor());
      if (pinned) {
        // The previous run's copy from this buffer is done: this run's inputs were staged after it.
        pinned_results_[j].copy_(results[j].toTensor());
        slots[j].toTensor().copy_(pinned_results_[j], /*non_blocking=*/true);
      } else {
        copy_into_slot(slots[j], results[j]);  // lists element by element; scalars were captured as they are
      }
    }
  }
  join(main);
}

void HostStep::join(const c10::cuda::CUDAStream& main) {
  if (!own_stream_) return;
  done_event_.record(*own_stream_);
  done_event_.block(main);
}

}  // namespace opara
