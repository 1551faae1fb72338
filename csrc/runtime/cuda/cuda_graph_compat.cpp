#include "runtime/cuda/cuda_graph_compat.h"

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <exception>
#include <map>
#include <mutex>
#include <tuple>

namespace opara {
namespace graph_pools {
namespace {

// Runs one step of the protocol; false when it threw (the step was done already, or never needed).
template <typename Step>
bool attempt(Step&& step) noexcept {
  try {
    step();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

void hold(c10::DeviceIndex device, c10::MempoolId_t pool) {
  c10::cuda::CUDACachingAllocator::createOrIncrefPool(device, pool);
  // The host allocator has no incref of its own: beginning and ending an allocation to the pool,
  // with a filter that takes no stream, leaves one reference.
  at::HostAllocator* host = at::getHostAllocator(at::kCUDA);
  host->begin_allocate_to_pool(pool, [](c10::Stream) { return false; });
  host->end_allocate_to_pool(pool);
}

bool release(c10::DeviceIndex device, c10::MempoolId_t pool) noexcept {
  const bool device_released = attempt([&] { c10::cuda::CUDACachingAllocator::releasePool(device, pool); });
  // On its own: the host's reference is dropped even when the device's was gone.
  const bool host_released = attempt([&] { at::getHostAllocator(at::kCUDA)->release_pool(pool); });
  return device_released && host_released;
}

bool stop_recording(c10::DeviceIndex device, c10::MempoolId_t pool) noexcept {
  const bool device_stopped = attempt([&] { c10::cuda::CUDACachingAllocator::endAllocateToPool(device, pool); });
  // Throws when pinned memory was not being recorded.
  const bool host_stopped = attempt([&] { at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(pool); });
  return device_stopped && host_stopped;
}

}  // namespace graph_pools

void InspectableGraph::undo_failed_capture([[maybe_unused]] c10::MempoolId_t pool) noexcept {
#if !OPARA_TORCH_AT_LEAST(2, 12)
  for (auto& [generator, increment] : captured_generator_states_) generator->capturing_ = false;
#endif
#if !OPARA_TORCH_AT_LEAST(2, 14)
  // capture_begin sets the device just before it registers the pool with the device and host
  // allocators: unset, it failed before touching them.
  const bool reached_the_allocators = capture_dev_ != UNDEFINED_DEVICE;
  if (reached_the_allocators && !capture_ended_) {
    (void)graph_pools::stop_recording(capture_dev_, pool);
    (void)graph_pools::release(capture_dev_, pool);
  }
#endif
}

namespace {

using WorkspaceMap = decltype(at::cuda::WorkspaceMapWithMutex::map);
using HeldWorkspaces = std::multimap<WorkspaceMap::key_type, WorkspaceMap::mapped_type>;

// Moves the entries of `from` whose stream (the key's second element) is one of `streams` to `to`.
void move_streams(at::cuda::WorkspaceMapWithMutex& from, HeldWorkspaces& to, const std::vector<cudaStream_t>& streams) {
  if (streams.empty()) return;
  const std::unique_lock<std::shared_mutex> lock(from.mutex);
  for (auto it = from.map.begin(); it != from.map.end();) {
    const auto* stream = static_cast<cudaStream_t>(std::get<1>(it->first));
    if (std::find(streams.begin(), streams.end(), stream) == streams.end()) {
      ++it;
      continue;
    }
    to.emplace(it->first, std::move(it->second));
    it = from.map.erase(it);
  }
}

// Moves one held entry per key back into `to`, unless `to` has one for it.
void move_back(HeldWorkspaces& from, at::cuda::WorkspaceMapWithMutex& to) {
  const std::unique_lock<std::shared_mutex> lock(to.mutex);
  for (auto it = from.begin(); it != from.end();) {
    if (to.map.count(it->first) != 0) {
      ++it;
      continue;
    }
    to.map.emplace(it->first, std::move(it->second));
    it = from.erase(it);
  }
}

}  // namespace

struct BlasWorkspaces::Held {
  HeldWorkspaces cublas;
  HeldWorkspaces cublaslt;
  std::vector<cudaStream_t> streams;  // every stream taken from: what was lent is taken back from them
};

BlasWorkspaces::BlasWorkspaces() : held_(std::make_unique<Held>()) {}
BlasWorkspaces::~BlasWorkspaces() = default;

void BlasWorkspaces::take(const std::vector<cudaStream_t>& streams) {
  for (cudaStream_t stream : streams) {
    if (std::find(held_->streams.begin(), held_->streams.end(), stream) == held_->streams.end()) {
      held_->streams.push_back(stream);
    }
  }
  move_streams(at::cuda::cublas_handle_stream_to_workspace(), held_->cublas, held_->streams);
  move_streams(at::cuda::cublaslt_handle_stream_to_workspace(), held_->cublaslt, held_->streams);
}

void BlasWorkspaces::lend() {
  move_back(held_->cublas, at::cuda::cublas_handle_stream_to_workspace());
  move_back(held_->cublaslt, at::cuda::cublaslt_handle_stream_to_workspace());
}

std::size_t BlasWorkspaces::size() const {
  return held_->cublas.size() + held_->cublaslt.size();
}

std::size_t BlasWorkspaces::bytes() const {
  return held_->cublas.size() * at::cuda::getChosenWorkspaceSize() +
         held_->cublaslt.size() * at::cuda::getCUDABlasLtWorkspaceSize();
}

}  // namespace opara
