#include "runtime/cuda/stream_lease.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <map>
#include <mutex>

#include "runtime/cuda/device_memory.h"

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

}  // namespace opara
