#include "runtime/cuda/cuda_event.h"

#include <c10/cuda/CUDAException.h>

namespace opara {

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

}  // namespace opara
