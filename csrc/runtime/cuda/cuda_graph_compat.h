#pragma once

// The one place opara reaches into LibTorch's internals: at::cuda::CUDAGraph's protected members,
// and the caching allocators' graph-pool protocol that CUDAGraph drives for its own captures.
// They are not API and change between torch releases; each release from 2.11 to 2.15 was checked
// against its wheel's headers (ATen/cuda/CUDAGraph.h, ATen/cuda/CUDAGeneratorImpl.h,
// c10/cuda/CUDACachingAllocator.h, ATen/core/CachingHostAllocator.h) and against CUDAGraph.cpp as
// the PyTorch repository has it around those releases:
//
//   2.11        A capture puts every registered generator in capture mode (`capturing_`), and only
//               a successful capture_end takes it out. reset() releases the pool only after a
//               capture that ended: a failed one leaves the pool recorded and referenced.
//   2.12, 2.13  Each capture has its own generator state, keyed by its capture id, which reset()
//               removes: nothing is left in capture mode. The pool is as in 2.11.
//   2.14, 2.15  reset() (which the destructor runs) also ends a failed capture's recording into
//               its pool and drops the reference capture_begin took (`allocated_pool_`,
//               `capturing_to_pool_`): releasing it by hand as well would free a pool that
//               CapturePool still holds.
//
// The allocators' pool protocol (createOrIncrefPool, endAllocateToPool, releasePool;
// begin_allocate_to_pool, end_allocate_to_pool, release_pool) is the same in all five. So are the
// maps that keep cuBLAS's and cuBLASLt's workspaces per (handle, stream) (ATen/cuda/
// CUDAContextLight.h), but for what they hold: a DataPtr up to 2.14, a DataPtr and its size in 2.15.
// For a newer torch, check the same four headers and CUDAGraph.cpp: what reset() (and the
// destructor) undoes after a capture that failed before, in or after cudaStreamEndCapture, and
// whether the allocators' pool protocol kept its meaning (CapturePool holds a pool with it). Then
// add the release here and raise OPARA_NEWEST_TORCH in CMakeLists.txt.

#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <torch/version.h>

#include <cstddef>
#include <memory>
#include <vector>

#define OPARA_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if !OPARA_TORCH_AT_LEAST(2, 11)
#error "opara needs torch 2.11 or newer: csrc/runtime/cuda/cuda_graph_compat.h knows CUDAGraph from 2.11 to 2.15"
#elif OPARA_TORCH_AT_LEAST(2, 16)
// Not a #warning: the build treats warnings as errors, and a newer torch should still build.
#pragma message( \
    "opara: this torch is newer than 2.15, the newest whose CUDAGraph internals csrc/runtime/cuda/cuda_graph_compat.h was checked against; check it as its top comment says")
#endif

namespace opara {

// CUDAGraph keeps what a failed capture left behind to itself; GraphCapture::abandon needs it up to
// torch 2.13. From 2.14 on, nothing here reads CUDAGraph's internals: its reset() undoes it all.
class InspectableGraph final : public at::cuda::CUDAGraph {
 public:
  using at::cuda::CUDAGraph::CUDAGraph;
  // Undoes what a capture that failed part-way (its stream capture over) leaves behind and this
  // torch's reset() does not: the generators' capture mode (2.11), and the allocators' recording
  // into `pool` and the reference to it that capture_begin took (up to 2.13, unless the capture
  // ended: then reset() releases it). Run it before the graph is destroyed; never throws.
  void undo_failed_capture(c10::MempoolId_t pool) noexcept;
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

// The cuBLAS and cuBLASLt workspaces of some streams, taken out of LibTorch's maps. LibTorch keeps
// one per (handle, stream) and frees them all on at::cuda::clearCublasWorkspaces(), which
// Inductor's CUDA-graph trees call around every recording: a graph captured with one would then
// write memory the allocator has given to someone else. Held here, a workspace lives as long as
// the graphs captured with it.
class BlasWorkspaces {
 public:
  BlasWorkspaces();
  // Frees what is held: the graphs captured with it must be gone, their last replay done.
  ~BlasWorkspaces();
  BlasWorkspaces(const BlasWorkspaces&) = delete;
  BlasWorkspaces& operator=(const BlasWorkspaces&) = delete;

  // Moves the workspaces LibTorch's maps hold for `streams`, and for every stream given before
  // (a stream discarded after a failed capture may still have one lent out), here.
  void take(const std::vector<cudaStream_t>& streams);
  // Moves them back, where the maps hold none for their (handle, stream): the next warm-ups and
  // capture on those streams use them again rather than new ones.
  void lend();
  // How many are held.
  [[nodiscard]] std::size_t size() const;
  // Their bytes: LibTorch's workspace size for each (cuBLAS's, cuBLASLt's).
  [[nodiscard]] std::size_t bytes() const;

 private:
  struct Held;
  std::unique_ptr<Held> held_;
};

}  // namespace opara
