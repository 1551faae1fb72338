#include "runtime/cuda/cuda_streams.h"

#include <ATen/ATen.h>
#include <ATen/core/CachingHostAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <iterator>
#include <map>
#include <mutex>

namespace opara {
namespace {

// Idle streams per device; process lifetime.
struct IdleStreams {
  std::mutex mutex;
  std::map<c10::DeviceIndex, std::vector<cudaStream_t>> by_device;
};

IdleStreams& idle_streams() {
  static auto* idle = new IdleStreams;  // never destroyed: streams may be returned during exit
  return *idle;
}

}  // namespace

StreamLease::StreamLease(c10::DeviceIndex device, std::size_t count) : device_(device) {
  {
    std::lock_guard<std::mutex> lock(idle_streams().mutex);
    auto& idle = idle_streams().by_device[device];
    while (raw_.size() < count && !idle.empty()) {
      raw_.push_back(idle.back());
      idle.pop_back();
    }
  }
  c10::cuda::CUDAGuard guard(device);
  while (raw_.size() < count) {
    cudaStream_t stream = nullptr;
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    raw_.push_back(stream);
  }
  streams_.reserve(count);
  for (cudaStream_t stream : raw_) streams_.push_back(c10::cuda::getStreamFromExternal(stream, device));
}

StreamLease::~StreamLease() {
  if (discarded_) return;  // leaked on purpose: destroying a stream still capturing is undefined
  std::lock_guard<std::mutex> lock(idle_streams().mutex);
  auto& idle = idle_streams().by_device[device_];
  idle.insert(idle.end(), raw_.begin(), raw_.end());
}

CudaEvent::CudaEvent() {
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_) C10_CUDA_CHECK_WARN(cudaEventDestroy(event_));
}

void CudaEvent::record(const c10::cuda::CUDAStream& stream) {
  C10_CUDA_CHECK(cudaEventRecord(event_, stream.stream()));
}

void CudaEvent::block(const c10::cuda::CUDAStream& stream) const {
  C10_CUDA_CHECK(cudaStreamWaitEvent(stream.stream(), event_, 0));
}

void CudaEvent::synchronize() const {
  C10_CUDA_CHECK(cudaEventSynchronize(event_));
}

PoolReference::PoolReference(c10::DeviceIndex device, std::pair<unsigned long long, unsigned long long> pool)
    : device_(device), pool_{pool.first, pool.second} {
  c10::cuda::CUDACachingAllocator::createOrIncrefPool(device_, pool_);
  // The host allocator has no incref of its own: beginning and ending an allocation to the pool,
  // with a filter that takes no stream, leaves one reference.
  at::HostAllocator* host = at::getHostAllocator(at::kCUDA);
  host->begin_allocate_to_pool(pool_, [](c10::Stream) { return false; });
  host->end_allocate_to_pool(pool_);
}

PoolReference::~PoolReference() {
  try {
    c10::cuda::CUDACachingAllocator::releasePool(device_, pool_);
    at::getHostAllocator(at::kCUDA)->release_pool(pool_);
  } catch (const std::exception& error) {
    TORCH_WARN("opara: releasing a shared graph memory pool failed: ", error.what());
  }
}

std::shared_ptr<StreamLease> lease_for_pool(c10::DeviceIndex device,
                                            std::pair<unsigned long long, unsigned long long> pool, std::size_t count) {
  static std::mutex mutex;
  static std::map<std::pair<unsigned long long, unsigned long long>, std::weak_ptr<StreamLease>> leases;
  const std::lock_guard<std::mutex> lock(mutex);
  for (auto it = leases.begin(); it != leases.end();) it = it->second.expired() ? leases.erase(it) : std::next(it);
  std::weak_ptr<StreamLease>& slot = leases[pool];
  // A lease a failed capture discarded is never lent again.
  if (auto lease = slot.lock(); lease && lease->size() >= count && !lease->discarded()) return lease;
  auto lease = std::make_shared<StreamLease>(device, count);
  slot = lease;
  return lease;
}

std::size_t warm_idle_streams(c10::DeviceIndex device, std::size_t count) {
  c10::cuda::CUDAGuard guard(device);
  const std::size_t before = allocated_bytes(device);
  {
    const StreamLease lease(device, count);
    const auto options = at::TensorOptions().device(c10::Device(c10::kCUDA, device)).dtype(at::kFloat);
    for (std::size_t k = 0; k < lease.size(); ++k) {
      const c10::cuda::CUDAStreamGuard on(lease[k]);
      const at::Tensor a = at::ones({64, 64}, options);
      (void)at::mm(a, a);                              // cuBLAS
      (void)at::addmm(at::ones({64}, options), a, a);  // cuBLASLt (a bias epilogue)
      lease[k].synchronize();
    }
  }  // the lease returns its streams idle, last leased first lent
  const std::size_t after = allocated_bytes(device);
  return after > before ? after - before : 0;
}

std::size_t allocated_bytes(c10::DeviceIndex device) {
  return static_cast<std::size_t>(c10::cuda::CUDACachingAllocator::getDeviceStats(device).allocated_bytes[0].current);
}

std::size_t peak_allocated_bytes(c10::DeviceIndex device) {
  return static_cast<std::size_t>(c10::cuda::CUDACachingAllocator::getDeviceStats(device).allocated_bytes[0].peak);
}

std::size_t reserved_bytes(c10::DeviceIndex device) {
  return static_cast<std::size_t>(c10::cuda::CUDACachingAllocator::getDeviceStats(device).reserved_bytes[0].current);
}

}  // namespace opara
