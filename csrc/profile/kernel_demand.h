#pragma once

// The resource demand of recorded kernels on a GPU (CUDA's occupancy calculator, host-side): what
// the model profiler writes into a profile, not part of the public API.

#include <vector>

#include "opara/profile.h"

namespace opara {

struct KernelDemand : ResourceDemand {
  int resident_blocks_per_sm = 0;  // the occupancy calculator's answer
};

// The occupancy of one kernel on `device` from its block size, registers and shared memory (CUDA's
// occupancy calculator, cuda_occupancy.h, host-side), and the demand and fractions that follow.
// Throws opara::Error naming the kernel when the calculator does not know the device or the kernel
// cannot fit one block on an SM of it (the record is of another device).
KernelDemand kernel_demand(const KernelRecord& kernel, const DeviceLimits& device);

// A node's demand: each kernel's weighted by its duration (equal weights when no kernel has a
// duration); all zero without kernels.
ResourceDemand node_demand(const std::vector<KernelRecord>& kernels, const DeviceLimits& device);

}  // namespace opara
