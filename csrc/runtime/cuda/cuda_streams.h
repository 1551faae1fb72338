#pragma once

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace opara {

// Streams we create ourselves (cudaStreamNonBlocking), lent out for warm-up and capture.
// c10's stream pool hands out 32 streams per priority round-robin, so past 32 two of a Plan's
// streams would silently be one; ours are distinct however many a Plan opens. A captured graph
// does not replay on the streams it was captured on, but it holds the cuBLAS workspace of each
// (handle, stream): a graph keeps its lease while it lives, and the streams go back to the pool
// for the next capture when it is gone.
class StreamLease {
 public:
  StreamLease(c10::DeviceIndex device, std::size_t count);
  ~StreamLease();
  StreamLease(const StreamLease&) = delete;
  StreamLease& operator=(const StreamLease&) = delete;

  [[nodiscard]] const c10::cuda::CUDAStream& operator[](std::size_t index) const { return streams_[index]; }
  [[nodiscard]] std::size_t size() const { return streams_.size(); }
  // After a failed capture a stream may still be in a capture sequence: destroy, never reuse.
  void discard() { discarded_ = true; }
  [[nodiscard]] bool discarded() const { return discarded_; }

 private:
  c10::DeviceIndex device_;
  std::vector<c10::cuda::CUDAStream> streams_;
  std::vector<cudaStream_t> raw_;
  bool discarded_ = false;
};

// cudaEvent_t without timing, destroyed with its owner.
class CudaEvent {
 public:
  CudaEvent();
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  CudaEvent(CudaEvent&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }
  CudaEvent& operator=(CudaEvent&& other) = delete;

  void record(const c10::cuda::CUDAStream& stream);
  void block(const c10::cuda::CUDAStream& stream) const;
  // Waits on the host until the work before the last record() is done.
  void synchronize() const;

 private:
  cudaEvent_t event_ = nullptr;
};

// A reference to a graph memory pool, held while it lives, in the caching allocator and in the
// pinned host allocator alike: a pool id from at::cuda::graph_pool_handle() holds none, and a
// pool whose count fell to 0 (a failed capture released it) cannot be captured into again (the
// allocators assert). Models that share a pool hold one each, so a retry after a failed capture
// and the next model find the pool alive.
class PoolReference {
 public:
  PoolReference(c10::DeviceIndex device, std::pair<unsigned long long, unsigned long long> pool);
  ~PoolReference();
  PoolReference(const PoolReference&) = delete;
  PoolReference& operator=(const PoolReference&) = delete;

 private:
  c10::DeviceIndex device_;
  c10::MempoolId_t pool_;
};

// The streams of the models that capture into one shared memory pool (a GraphSet's buckets): the
// caching allocator reuses a block one capture freed only on the stream that allocated it, so the
// models share their streams too. The lease of `pool` when it has at least `count` streams, else a
// new, larger one that later models of the pool share. Models of one pool never run at once (their
// pool forbids it), so sharing the streams' cuBLAS workspaces is safe.
std::shared_ptr<StreamLease> lease_for_pool(c10::DeviceIndex device,
                                            std::pair<unsigned long long, unsigned long long> pool, std::size_t count);

// Makes `count` of the idle streams the next leases get (creating any missing) carry a cuBLAS
// and cuBLASLt workspace, by one small matrix product each, and returns them idle. A workspace is
// made per (handle, stream) on first use and lives as long as the process (32 MiB on Hopper): a
// benchmark that warms the streams first charges none of them to whichever mode first leases a
// stream. Returns the bytes the workspaces took.
std::size_t warm_idle_streams(c10::DeviceIndex device, std::size_t count);

// Bytes the caching allocator has handed out on `device` now, at most since the last
// resetPeakStats, and holds from the driver now.
std::size_t allocated_bytes(c10::DeviceIndex device);
std::size_t peak_allocated_bytes(c10::DeviceIndex device);
std::size_t reserved_bytes(c10::DeviceIndex device);

}  // namespace opara
