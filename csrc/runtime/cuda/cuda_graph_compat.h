#pragma once

// The one place opara reaches into LibTorch's internals: at::cuda::CUDAGraph's protected members,
// and the caching allocators' graph-pool protocol that CUDAGraph drives for its own captures.
// They are not API and may change in any torch release; this is written against torch 2.11
// (ATen/cuda/CUDAGraph.h). With another version, check that CUDAGraph still has `capture_ended_`,
// `capture_dev_` (set in capture_begin right before beginAllocateToPool) and
// `captured_generator_states_` (generator -> offset increment) and that a generator's
// `capturing_` is still how capture mode is kept; that the device allocator still has
// createOrIncrefPool / endAllocateToPool / releasePool and the CUDA host allocator
// begin_allocate_to_pool / end_allocate_to_pool / release_pool with the meaning written below
// (cuda_graph_compat.cpp); then widen the check below.

#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR != 2 || TORCH_VERSION_MINOR != 11
#error \
    "csrc/runtime/cuda/cuda_graph_compat.h reads CUDAGraph internals of torch 2.11: check them for this torch (see the comment above)"
#endif

namespace opara {

// CUDAGraph keeps whether its capture ended, and which random generators it put in capture mode,
// to itself; GraphCapture::abandon needs both.
class InspectableGraph final : public at::cuda::CUDAGraph {
 public:
  using at::cuda::CUDAGraph::CUDAGraph;
  [[nodiscard]] bool capture_ended() const { return capture_ended_; }
  // capture_begin sets the device just before it registers the pool with the device and host
  // allocators; unset, it failed before touching them.
  [[nodiscard]] bool reached_the_allocators() const { return capture_dev_ != UNDEFINED_DEVICE; }
  // capture_begin put every CUDA generator it registered in capture mode, and only a successful
  // capture_end takes them out: after a failed capture the next eager random op would throw
  // ("Offset increment outside graph capture") until some later capture succeeded.
  void release_generators() noexcept {
    for (auto& [generator, increment] : captured_generator_states_) generator->capturing_ = false;
  }
};

// The graph-pool protocol of LibTorch's two caching allocators (device memory, pinned host memory).
// A pool id from at::cuda::graph_pool_handle() holds no reference; a pool whose count falls to 0
// is freed and cannot be captured into again (the allocators assert).
namespace graph_pools {

// One reference to `pool` in both allocators, as CUDAGraph::capture_begin takes one.
void hold(c10::DeviceIndex device, c10::MempoolId_t pool);
// Drops one reference in both allocators (the pool's memory goes back at 0). False when either
// refused (it held none); never throws.
bool release(c10::DeviceIndex device, c10::MempoolId_t pool) noexcept;
// Both allocators stop recording allocations into `pool` (what capture_end does after the stream
// capture ended). False when either was not recording into it; never throws.
bool stop_recording(c10::DeviceIndex device, c10::MempoolId_t pool) noexcept;

}  // namespace graph_pools

}  // namespace opara
