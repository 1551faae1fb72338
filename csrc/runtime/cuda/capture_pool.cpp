#include "runtime/cuda/capture_pool.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <map>

#include "runtime/cuda/cuda_graph_compat.h"

namespace opara {

CapturePool::CapturePool(c10::DeviceIndex device, c10::MempoolId_t id) : device_(device), id_(id) {
  graph_pools::hold(device_, id_);
}

CapturePool::~CapturePool() {
  if (!graph_pools::release(device_, id_)) TORCH_WARN("opara: releasing a graph memory pool failed");
}

std::shared_ptr<CapturePool> CapturePool::create(c10::DeviceIndex device) {
  return find_or_create(device, at::cuda::graph_pool_handle());
}

std::shared_ptr<CapturePool> CapturePool::find_or_create(c10::DeviceIndex device, c10::MempoolId_t id) {
  if (is_null_pool_id(id)) id = at::cuda::graph_pool_handle();
  // The live pools by id, so that compiles naming one share it.
  static std::mutex mutex;
  static std::map<c10::MempoolId_t, std::weak_ptr<CapturePool>> pools;
  const std::lock_guard<std::mutex> lock(mutex);
  for (auto it = pools.begin(); it != pools.end();) it = it->second.expired() ? pools.erase(it) : std::next(it);
  std::weak_ptr<CapturePool>& slot = pools[id];
  if (auto pool = slot.lock()) return pool;
  std::shared_ptr<CapturePool> pool(new CapturePool(device, id));
  slot = pool;
  return pool;
}

std::vector<c10::cuda::CUDAStream> CapturePool::capture_streams(int plan_streams) {
  const std::size_t count = streams_for(plan_streams);
  const std::lock_guard<std::mutex> lock(streams_mutex_);
  if (streams_.size() < count) {
    leases_.push_back(std::make_unique<StreamLease>(device_, count - streams_.size()));
    const StreamLease& added = *leases_.back();
    for (std::size_t k = 0; k < added.size(); ++k) streams_.push_back(added[k]);
  }
  return {streams_.begin(), streams_.begin() + static_cast<std::ptrdiff_t>(count)};
}

void CapturePool::discard_streams() {
  const std::lock_guard<std::mutex> lock(streams_mutex_);
  for (const auto& lease : leases_) lease->discard();
  leases_.clear();
  streams_.clear();
}

void CapturePool::run_in_turn(const std::function<void()>& run) {
  const std::lock_guard<std::mutex> lock(run_mutex_);
  const c10::cuda::CUDAGuard device_guard(device_);  // the event is made and recorded on the pool's device
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device_);
  if (last_run_) last_run_->block(stream);
  run();
  if (!last_run_) last_run_.emplace();
  last_run_->record(stream);
}

}  // namespace opara
