#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/cuda/CUDAStream.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "exec/eager_executor.h"
#include "opara/plan.h"
#include "overflow/segments.h"
#include "runtime/cpu/cpu_parallel_executor.h"
#include "runtime/cuda/cuda_event.h"

namespace opara {

// Where a host step's nodes run.
enum class HostSide : std::uint8_t {
  kDevice,  // eagerly on the GPU, node by node (operations that synchronise with the host)
  kCpu,     // on the CPU: inputs copied to pinned buffers, nodes on host threads, results copied back
};

// One host step of a CudaModel, run in three calls so that the model can launch graph work in
// between: start() queues what the step waits for on its own stream, finish() runs the nodes,
// publish() writes the results into the buffers the later graphs read and makes the main stream
// wait for them. On the CPU side, independent nodes run in parallel on a CpuParallelExecutor
// (Opara's streams over the step's own graph; chains stay on one thread), and every tensor
// crosses in pinned memory on the step's stream, so the copies overlap the main stream's graphs.
class HostStep {
 public:
  // `stream`: the step's own stream; none: the step runs on the caller's main stream, in order
  // with the graphs (no overlap).
  HostStep(const Segment& segment, c10::Device device, HostSide side, const std::vector<NodeCost>& costs,
           std::optional<c10::cuda::CUDAStream> stream);

  // The first run, at compile time (synchronous, on the current stream): the results as the later
  // graphs will read them, on the device, in buffers of their own.
  std::vector<c10::IValue> first_run(const std::vector<c10::IValue>& inputs);

  // Queues the step after the work queued on `main` so far: the copies of its device inputs to
  // pinned buffers (CPU side), or only the wait (device side). Returns at once.
  void start(const std::vector<c10::IValue>& inputs, const c10::cuda::CUDAStream& main);
  // Runs the nodes and returns their results: on the device, or on the CPU for the CPU side.
  std::vector<c10::IValue> finish();
  // Copies `results` into `slots` (tensors of the same shape and dtype, on the device) on the
  // step's stream and makes `main` wait for the copies.
  void publish(const std::vector<c10::IValue>& results, const std::vector<c10::IValue>& slots,
               const c10::cuda::CUDAStream& main);
  // Makes `main` wait for everything queued on the step's stream (before reading finish()'s results
  // elsewhere).
  void join(const c10::cuda::CUDAStream& main);

  [[nodiscard]] HostSide side() const { return side_; }
  // Bytes one run copies device-to-host and host-to-device.
  [[nodiscard]] std::size_t bytes_to_host() const { return bytes_to_host_; }
  [[nodiscard]] std::size_t bytes_to_device() const { return bytes_to_device_; }
  // Milliseconds finish() took, all runs together.
  [[nodiscard]] double busy_ms() const { return busy_ms_; }

 private:
  [[nodiscard]] const c10::cuda::CUDAStream& step_stream(const c10::cuda::CUDAStream& main) const {
    return own_stream_ ? *own_stream_ : main;
  }

  const Graph* graph_;  // the segment's, owned by the model
  c10::Device device_;
  HostSide side_;
  std::optional<c10::cuda::CUDAStream> own_stream_;
  std::optional<c10::cuda::CUDAStream> main_;  // of the run in progress
  std::unique_ptr<EagerExecutor> eager_;       // device side
  std::unique_ptr<CpuParallelExecutor> cpu_;   // CPU side
  std::vector<at::Tensor> pinned_inputs_;      // by input: pinned buffer of a device tensor (undefined: none)
  std::vector<at::Tensor> pinned_results_;     // by output: pinned buffer of a CPU tensor (undefined: none)
  std::vector<c10::IValue> staged_;            // finish()'s inputs
  CudaEvent main_ready_;                       // the main stream's work the step waits for
  CudaEvent staged_event_;                     // its inputs in pinned memory
  CudaEvent done_event_;                       // its results copied
  std::size_t bytes_to_host_ = 0;
  std::size_t bytes_to_device_ = 0;
  double busy_ms_ = 0;
};

}  // namespace opara
