#pragma once

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

namespace opara {

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

}  // namespace opara
