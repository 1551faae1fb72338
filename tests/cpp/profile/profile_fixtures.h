#pragma once

// Synthetic kernel records and device limits, shared by the profile tests. The occupancies in the
// comments are worked out by hand from the CUDA occupancy rules (CUDA C Programming Guide,
// "Occupancy"; the limits below are an H100 SXM's).

#include <string>

#include "opara/profile.h"

namespace opara::testing {

// H100 SXM: 132 SMs, 2,048 threads (64 warps), 32 blocks, 64 Ki registers and 228 KiB of shared
// memory per SM; 1 KiB of shared memory reserved per block.
inline DeviceLimits h100() {
  DeviceLimits device;
  device.name = "NVIDIA H100 80GB HBM3";
  device.compute_major = 9;
  device.compute_minor = 0;
  device.sm_count = 132;
  device.warp_size = 32;
  device.max_threads_per_sm = 2048;
  device.max_threads_per_block = 1024;
  device.max_blocks_per_sm = 32;
  device.registers_per_sm = 65536;
  device.registers_per_block = 65536;
  device.smem_per_sm = 233472;
  device.smem_per_block = 49152;
  device.smem_per_block_optin = 232448;
  device.reserved_smem_per_block = 1024;
  return device;
}

inline KernelRecord kernel(std::string name, std::int64_t blocks, std::int64_t threads, int registers,
                           std::int64_t dynamic_smem = 0, std::uint64_t duration_ns = 100,
                           std::uint32_t correlation = 0) {
  KernelRecord record;
  record.name = std::move(name);
  record.grid = Dim3{blocks, 1, 1};
  record.block = Dim3{threads, 1, 1};
  record.registers_per_thread = registers;
  record.dynamic_smem = dynamic_smem;
  record.start_ns = 1000;
  record.end_ns = 1000 + duration_ns;
  record.correlation_id = correlation;
  return record;
}

}  // namespace opara::testing
