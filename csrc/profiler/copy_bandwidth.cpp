#include "profiler/copy_bandwidth.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

namespace opara {
namespace {

constexpr std::int64_t kCopyBytes = std::int64_t{64} << 20;  // large enough to hide the launch latency
constexpr int kWarmupCopies = 2;
constexpr int kTimedCopies = 5;

double median_rate(at::Tensor& destination, const at::Tensor& source) {
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
  std::vector<double> rates;
  for (int copy = 0; copy < kWarmupCopies + kTimedCopies; ++copy) {
    at::cuda::CUDAEvent start(cudaEventDefault);
    at::cuda::CUDAEvent end(cudaEventDefault);
    start.record(stream);
    destination.copy_(source, /*non_blocking=*/true);
    end.record(stream);
    end.synchronize();
    if (copy >= kWarmupCopies) rates.push_back(static_cast<double>(kCopyBytes) / (start.elapsed_time(end) * 1e-3));
  }
  std::nth_element(rates.begin(), rates.begin() + kTimedCopies / 2, rates.end());
  return rates[kTimedCopies / 2];
}

CopyBandwidth measure(c10::DeviceIndex device) {
  c10::cuda::CUDAGuard guard(device);
  at::Tensor host = at::empty({kCopyBytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  at::Tensor on_device = at::empty({kCopyBytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, device));
  host.fill_(1);
  CopyBandwidth bandwidth;
  bandwidth.h2d_bytes_per_s = median_rate(on_device, host);
  bandwidth.d2h_bytes_per_s = median_rate(host, on_device);
  return bandwidth;
}

}  // namespace

CopyBandwidth copy_bandwidth(c10::DeviceIndex device) {
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, CopyBandwidth> measured;
  std::lock_guard<std::mutex> lock(mutex);
  const auto found = measured.find(device);
  if (found != measured.end()) return found->second;
  return measured[device] = measure(device);
}

}  // namespace opara
