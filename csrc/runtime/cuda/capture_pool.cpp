#include "runtime/cuda/capture_pool.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <map>

#include "runtime/cuda/cuda_graph_compat.h"

namespace opara {

CapturePool::CapturePool(c10::DeviceIndex device, c10::MempoolId_t id)
    : device_(device), id_(id), workspaces_(std::make_unique<BlasWorkspaces>()) {
  graph_pools::hold(device_, id_);
}

CapturePool::~CapturePool() {
  workspaces_.reset();
  if (!graph_pools::release(device_, id_)) TORCH_WARN("opara: releasing a graph memory pool failed");
}

std::shared_ptr<CapturePool> CapturePool::create(c10::DeviceIndex device) {
  return find_or_create(device, {0, 0});
}

std::shared_ptr<CapturePool> CapturePool::find_or_create(c10::DeviceIndex device, c10::MempoolId_t named) {
  struct Entry {
    std::weak_ptr<CapturePool> pool;
    bool named_by_caller = false;  // remembered after its pool is gone (below)
  };
  // The pools by the id they were named by, so that compiles naming one share it.
  static std::mutex mutex;
  static std::map<c10::MempoolId_t, Entry> pools;
  const std::lock_guard<std::mutex> lock(mutex);
  for (auto it = pools.begin(); it != pools.end();) {
    it = it->second.pool.expired() && !it->second.named_by_caller ? pools.erase(it) : std::next(it);
  }
  const bool named_by_caller = !is_null_pool_id(named);
  const c10::MempoolId_t key = named_by_caller ? named : at::cuda::graph_pool_handle();
  Entry& entry = pools[key];
  if (auto pool = entry.pool.lock()) return pool;
  // A pool released by its last holder stays in the allocators, at no reference, until they empty
  // their cache, and taking it again fails their assertion: an id named again after that names a
  // fresh pool (nothing could share the old one any more).
  const bool released_before = named_by_caller && entry.named_by_caller;
  std::shared_ptr<CapturePool> pool(new CapturePool(device, released_before ? at::cuda::graph_pool_handle() : key));
  entry = {pool, named_by_caller};
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

void CapturePool::lend_workspaces() {
  const std::lock_guard<std::mutex> lock(workspaces_mutex_);
  workspaces_->lend();
}

void CapturePool::take_workspaces() noexcept {
  std::vector<cudaStream_t> streams;
  {
    const std::lock_guard<std::mutex> lock(streams_mutex_);
    for (const c10::cuda::CUDAStream& stream : streams_) streams.push_back(stream.stream());
  }
  const std::lock_guard<std::mutex> lock(workspaces_mutex_);
  try {
    workspaces_->take(streams);
  } catch (const std::exception& error) {
    TORCH_WARN("opara: taking the cuBLAS workspaces of a capture failed: ", error.what());
  }
}

std::size_t CapturePool::workspaces_held() const {
  const std::lock_guard<std::mutex> lock(workspaces_mutex_);
  return workspaces_->size();
}

std::size_t CapturePool::workspace_bytes() const {
  const std::lock_guard<std::mutex> lock(workspaces_mutex_);
  return workspaces_->bytes();
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
