#include "runtime/cuda/cuda_graph_compat.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <exception>

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

}  // namespace opara
