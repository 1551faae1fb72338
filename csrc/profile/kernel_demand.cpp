// Resource demand from kernel records (Opara section 3.2): every block of a kernel runs the same
// code, so one block's threads, registers and shared memory, with the device's limits, say how
// many blocks fit on one SM at once; that times the SM count is how many blocks the GPU holds.
// A kernel's demand is the share of that capacity its grid fills:
//
//   H100 (132 SMs), 256 threads x 32 registers, no shared memory: 8 blocks per SM (the warp and
//   register limits), 1,056 resident; a grid of 528 blocks has demand 0.5, one of 5,000 has 1.
//
// The blocks per SM come from CUDA's own occupancy calculator (cuda_occupancy.h), which runs on
// the host from the device's properties alone: a profile is re-evaluated without a GPU.
#include <cuda_occupancy.h>
#include <fmt/format.h>

#include <algorithm>

#include "opara/error.h"
#include "opara/profile.h"
#include "profile/kernel_demand.h"

namespace opara {
namespace {

cudaOccDeviceProp occupancy_properties(const DeviceLimits& device) {
  cudaOccDeviceProp properties;
  properties.computeMajor = device.compute_major;
  properties.computeMinor = device.compute_minor;
  properties.maxThreadsPerBlock = device.max_threads_per_block;
  properties.maxThreadsPerMultiprocessor = device.max_threads_per_sm;
  properties.regsPerBlock = device.registers_per_block;
  properties.regsPerMultiprocessor = device.registers_per_sm;
  properties.warpSize = device.warp_size;
  properties.sharedMemPerBlock = static_cast<std::size_t>(device.smem_per_block);
  properties.sharedMemPerMultiprocessor = static_cast<std::size_t>(device.smem_per_sm);
  properties.numSms = device.sm_count;
  properties.sharedMemPerBlockOptin = static_cast<std::size_t>(device.smem_per_block_optin);
  properties.reservedSharedMemPerBlock = static_cast<std::size_t>(device.reserved_smem_per_block);
  return properties;
}

// The kernel as it was launched: it ran, so it was allowed the dynamic shared memory it asked
// for (opted in past the default per-block limit when it needed to).
cudaOccFuncAttributes occupancy_attributes(const KernelRecord& kernel, const DeviceLimits& device) {
  cudaOccFuncAttributes attributes;
  attributes.maxThreadsPerBlock = device.max_threads_per_block;
  attributes.numRegs = kernel.registers_per_thread;
  attributes.sharedSizeBytes = static_cast<std::size_t>(kernel.static_smem);
  attributes.partitionedGCConfig = PARTITIONED_GC_OFF;
  attributes.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
  attributes.maxDynamicSharedSizeBytes = static_cast<std::size_t>(kernel.dynamic_smem);
  attributes.numBlockBarriers = 1;  // what cudaOccFuncAttributes(cudaFuncAttributes) assumes
  return attributes;
}

}  // namespace

KernelDemand kernel_demand(const KernelRecord& kernel, const DeviceLimits& device) {
  if (kernel.blocks() <= 0 || kernel.threads_per_block() <= 0) {
    throw Error(fmt::format("kernel {}: a grid of {} blocks of {} threads is not a launch", kernel.name,
                            kernel.blocks(), kernel.threads_per_block()));
  }
  const cudaOccDeviceProp properties = occupancy_properties(device);
  const cudaOccFuncAttributes attributes = occupancy_attributes(kernel, device);
  const cudaOccDeviceState state;  // default carveout: the driver picks what the kernel needs
  cudaOccResult result{};
  const cudaOccError status = cudaOccMaxActiveBlocksPerMultiprocessor(&result, &properties, &attributes, &state,
                                                                      static_cast<int>(kernel.threads_per_block()),
                                                                      static_cast<std::size_t>(kernel.dynamic_smem));
  if (status != CUDA_OCC_SUCCESS) {
    throw Error(fmt::format(
        "kernel {}: CUDA's occupancy calculator rejects {} (compute capability {}.{}){}; profile with a CUDA toolkit "
        "that knows this GPU",
        kernel.name, device.name, device.compute_major, device.compute_minor,
        status == CUDA_OCC_ERROR_UNKNOWN_DEVICE ? ": unknown device" : ": invalid limits"));
  }
  if (result.activeBlocksPerMultiprocessor <= 0) {
    throw Error(fmt::format(
        "kernel {}: a block of {} threads, {} registers per thread and {} + {} bytes of shared memory does not fit "
        "on an SM of {}: the record is of another device",
        kernel.name, kernel.threads_per_block(), kernel.registers_per_thread, kernel.static_smem, kernel.dynamic_smem,
        device.name));
  }
  KernelDemand demand;
  demand.resident_blocks_per_sm = result.activeBlocksPerMultiprocessor;
  const double sms = device.sm_count;
  const double capacity = static_cast<double>(demand.resident_blocks_per_sm) * sms;
  const double blocks = static_cast<double>(kernel.blocks());
  demand.demand = std::min(1.0, blocks / capacity);
  // The blocks the GPU holds at once, and what they hold.
  const double in_flight = std::min(blocks, capacity);
  demand.thread_fraction =
      in_flight * static_cast<double>(kernel.threads_per_block()) / (sms * device.max_threads_per_sm);
  demand.register_fraction = in_flight * result.allocatedRegistersPerBlock / (sms * device.registers_per_sm);
  demand.smem_fraction = in_flight * static_cast<double>(result.allocatedSharedMemPerBlock) /
                         (sms * static_cast<double>(device.smem_per_sm));
  return demand;
}

ResourceDemand node_demand(const std::vector<KernelRecord>& kernels, const DeviceLimits& device) {
  ResourceDemand total;
  if (kernels.empty()) return total;
  double weights = 0;
  for (const KernelRecord& kernel : kernels) weights += static_cast<double>(kernel.duration_ns());
  for (const KernelRecord& kernel : kernels) {
    const double weight =
        weights > 0 ? static_cast<double>(kernel.duration_ns()) / weights : 1.0 / static_cast<double>(kernels.size());
    const KernelDemand one = kernel_demand(kernel, device);
    total.demand += weight * one.demand;
    total.thread_fraction += weight * one.thread_fraction;
    total.register_fraction += weight * one.register_fraction;
    total.smem_fraction += weight * one.smem_fraction;
  }
  return total;
}

}  // namespace opara
