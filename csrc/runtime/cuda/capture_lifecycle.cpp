#include "runtime/cuda/capture_lifecycle.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <exception>

namespace opara {
namespace {

std::mutex& capture_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

std::unique_lock<std::mutex> begin_capture(InspectableGraph& graph, c10::MempoolId_t pool, c10::DeviceIndex device,
                                           cudaStream_t origin) {
  std::unique_lock<std::mutex> turn(capture_mutex());
  try {
    graph.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
  } catch (...) {
    if (graph.reached_the_allocators()) {
      abandon_capture(graph, device, pool, origin);
    } else {
      graph.release_generators();  // it may have put them in capture mode before it failed
    }
    throw;
  }
  return turn;
}

void abandon_capture(InspectableGraph& graph, c10::DeviceIndex device, c10::MempoolId_t pool,
                     cudaStream_t origin) noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(origin, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t broken = nullptr;
    (void)cudaStreamEndCapture(origin, &broken);  // fails when unjoined or invalidated, but ends the capture
    if (broken) (void)cudaGraphDestroy(broken);
  }
  (void)cudaGetLastError();
  graph.release_generators();
  if (graph.capture_ended()) return;  // the graph itself releases its pool
  try {
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device, pool);
  } catch (const std::exception&) {  // capture_end got that far
  }
  try {
    c10::cuda::CUDACachingAllocator::releasePool(device, pool);
  } catch (const std::exception&) {
  }
  at::HostAllocator* host = at::getHostAllocator(at::kCUDA);
  try {
    host->end_allocate_to_pool(pool);  // throws when pinned memory was not being recorded
  } catch (const std::exception&) {
  }
  try {
    host->release_pool(pool);  // on its own: the reference is dropped even when the end was done
  } catch (const std::exception&) {
  }
}

}  // namespace opara
