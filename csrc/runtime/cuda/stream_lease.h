#pragma once

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

namespace opara {

// Streams we create ourselves (cudaStreamNonBlocking), lent out for warm-up and capture.
// c10's stream pool hands out 32 streams per priority round-robin, so past 32 two of a Plan's
// streams would silently be one; ours are distinct however many a Plan opens. A finished lease's
// streams go back to an idle list for the next lease, unless it was discarded.
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

 private:
  c10::DeviceIndex device_;
  std::vector<c10::cuda::CUDAStream> streams_;
  std::vector<cudaStream_t> raw_;
  bool discarded_ = false;
};

// Makes `count` of the idle streams the next leases get (creating any missing) carry a cuBLAS
// and cuBLASLt workspace, by one small matrix product each, and returns them idle. A workspace is
// made per (handle, stream) on first use and lives as long as the process (32 MiB on Hopper): a
// benchmark that warms the streams first charges none of them to whichever mode first leases a
// stream. Returns the bytes the workspaces took.
std::size_t warm_idle_streams(c10::DeviceIndex device, std::size_t count);

}  // namespace opara
