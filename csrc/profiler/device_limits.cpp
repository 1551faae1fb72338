#include "profiler/device_limits.h"

#include <ATen/cuda/CUDAContext.h>

namespace opara {

DeviceLimits device_limits(c10::DeviceIndex device) {
  const cudaDeviceProp& properties = *at::cuda::getDeviceProperties(device);
  DeviceLimits limits;
  limits.name = properties.name;
  limits.compute_major = properties.major;
  limits.compute_minor = properties.minor;
  limits.sm_count = properties.multiProcessorCount;
  limits.warp_size = properties.warpSize;
  limits.max_threads_per_sm = properties.maxThreadsPerMultiProcessor;
  limits.max_threads_per_block = properties.maxThreadsPerBlock;
  limits.max_blocks_per_sm = properties.maxBlocksPerMultiProcessor;
  limits.registers_per_sm = properties.regsPerMultiprocessor;
  limits.registers_per_block = properties.regsPerBlock;
  limits.smem_per_sm = static_cast<std::int64_t>(properties.sharedMemPerMultiprocessor);
  limits.smem_per_block = static_cast<std::int64_t>(properties.sharedMemPerBlock);
  limits.smem_per_block_optin = static_cast<std::int64_t>(properties.sharedMemPerBlockOptin);
  limits.reserved_smem_per_block = static_cast<std::int64_t>(properties.reservedSharedMemPerBlock);
  return limits;
}

}  // namespace opara
