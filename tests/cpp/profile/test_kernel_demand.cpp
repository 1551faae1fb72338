// Resource demand from kernel records, against occupancies worked out by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "opara/error.h"
#include "opara/profile.h"
#include "profile/kernel_demand.h"
#include "profile_fixtures.h"

namespace opara {
namespace {

using testing::h100;
using ::testing::HasSubstr;
using testing::kernel;

constexpr double kExact = 1e-12;

TEST(KernelDemand, WarpAndRegisterLimitedKernel) {
  // 256 threads = 8 warps: 64 warps / 8 = 8 blocks. 32 registers: 1,024 per warp, 16 warps in
  // each of the 4 register sub-partitions (16,384 registers), 64 warps = 8 blocks. Shared memory:
  // only the 1 KiB reserved, 228 blocks. So 8 blocks per SM, 1,056 on the GPU.
  const KernelDemand half = kernel_demand(kernel("a", 528, 256, 32), h100());
  EXPECT_EQ(half.resident_blocks_per_sm, 8);
  EXPECT_NEAR(half.demand, 0.5, kExact);
  EXPECT_NEAR(half.thread_fraction, 528.0 * 256 / (132 * 2048), kExact);
  EXPECT_NEAR(half.register_fraction, 528.0 * 8 * 1024 / (132 * 65536), kExact);
  EXPECT_NEAR(half.smem_fraction, 528.0 * 1024 / (132 * 233472), kExact);
  // A grid larger than the GPU holds: demand 1, and the fractions are of the blocks held at once.
  const KernelDemand full = kernel_demand(kernel("a", 5000, 256, 32), h100());
  EXPECT_EQ(full.demand, 1.0);
  EXPECT_NEAR(full.thread_fraction, 1.0, kExact);
  EXPECT_NEAR(full.register_fraction, 1.0, kExact);
}

TEST(KernelDemand, RegisterLimitedKernelWithOptInSharedMemory) {
  // 128 threads x 128 registers: 4,096 registers per warp, 4 warps per sub-partition, 16 per SM,
  // 4 blocks of 4 warps. 48 KiB dynamic + 1 KiB reserved = 50,176 bytes (past the 48 KiB default,
  // so opted in): 228 KiB / 50,176 = 4 blocks. 4 blocks per SM, 528 on the GPU.
  const KernelDemand demand = kernel_demand(kernel("b", 264, 128, 128, 49152), h100());
  EXPECT_EQ(demand.resident_blocks_per_sm, 4);
  EXPECT_NEAR(demand.demand, 0.5, kExact);
  EXPECT_NEAR(demand.register_fraction, 264.0 * 4 * 4096 / (132 * 65536), kExact);  // 0.5
  EXPECT_NEAR(demand.smem_fraction, 264.0 * 50176 / (132 * 233472), kExact);
  EXPECT_NEAR(demand.thread_fraction, 264.0 * 128 / (132 * 2048), kExact);
}

TEST(KernelDemand, SharedMemoryLimitedKernel) {
  // 100,000 + 1,024 bytes, rounded up to the 128-byte granularity: 101,120; two fit in 228 KiB.
  // The 2 warps x 16 registers would allow 64 blocks, the block limit 32.
  const KernelDemand demand = kernel_demand(kernel("c", 66, 64, 16, 100000), h100());
  EXPECT_EQ(demand.resident_blocks_per_sm, 2);
  EXPECT_NEAR(demand.demand, 0.25, kExact);
  EXPECT_NEAR(demand.smem_fraction, 66.0 * 101120 / (132 * 233472), kExact);
  EXPECT_NEAR(demand.register_fraction, 66.0 * 2 * 512 / (132 * 65536), kExact);
}

TEST(KernelDemand, BlockLimitedKernel) {
  // 32 threads, few registers, no shared memory: warps allow 64 blocks, the SM holds at most 32.
  const KernelDemand demand = kernel_demand(kernel("tiny", 132, 32, 8), h100());
  EXPECT_EQ(demand.resident_blocks_per_sm, 32);
  EXPECT_NEAR(demand.demand, 132.0 / (32 * 132), kExact);
}

TEST(KernelDemand, ThreeDimensionalGridsAndBlocksCount) {
  KernelRecord record = kernel("3d", 1, 1, 32);
  record.grid = Dim3{4, 11, 3};    // 132 blocks
  record.block = Dim3{16, 16, 1};  // 256 threads: 8 blocks per SM, as kernel "a"
  EXPECT_NEAR(kernel_demand(record, h100()).demand, 132.0 / 1056, kExact);
}

TEST(KernelDemand, RejectsWhatCannotRunOnTheDevice) {
  try {
    kernel_demand(kernel("greedy", 10, 1024, 255), h100());  // 255 x 1,024 registers per block
    FAIL() << "a block too big for an SM was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("greedy"));
    EXPECT_THAT(error.what(), HasSubstr("does not fit"));
  }
  DeviceLimits unknown = h100();
  unknown.compute_major = 2;
  try {
    kernel_demand(kernel("a", 10, 256, 32), unknown);
    FAIL() << "an unknown device was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("compute capability 2.0"));
  }
  EXPECT_THROW(kernel_demand(kernel("empty", 0, 256, 32), h100()), Error);
}

TEST(NodeDemand, WeightsKernelsByDuration) {
  // 300 ns at demand 0.5 and 100 ns at 0.125: (0.5 x 300 + 0.125 x 100) / 400.
  const ResourceDemand demand =
      node_demand({kernel("a", 528, 256, 32, 0, 300), kernel("a", 132, 256, 32, 0, 100)}, h100());
  EXPECT_NEAR(demand.demand, 0.40625, kExact);
  EXPECT_NEAR(demand.thread_fraction, 0.40625, kExact);
  EXPECT_NEAR(demand.register_fraction, 0.40625, kExact);
  EXPECT_NEAR(demand.smem_fraction, 0.75 * 4096.0 / 233472 + 0.25 * 1024.0 / 233472, kExact);
}

TEST(NodeDemand, EqualWeightsWithoutDurationsAndZeroWithoutKernels) {
  EXPECT_NEAR(node_demand({kernel("a", 528, 256, 32, 0, 0), kernel("a", 132, 256, 32, 0, 0)}, h100()).demand,
              (0.5 + 0.125) / 2, kExact);
  const ResourceDemand none = node_demand({}, h100());
  EXPECT_EQ(none.demand, 0);
  EXPECT_EQ(none.smem_fraction, 0);
}

TEST(NodeDemand, IsAlwaysInTheUnitInterval) {
  for (std::int64_t blocks : {1, 7, 100, 1056, 100000}) {
    for (std::int64_t threads : {32, 96, 256, 1024}) {
      for (int registers : {16, 40, 64}) {
        const KernelDemand demand = kernel_demand(kernel("k", blocks, threads, registers), h100());
        EXPECT_GT(demand.demand, 0);
        EXPECT_LE(demand.demand, 1);
        for (double fraction : {demand.thread_fraction, demand.register_fraction, demand.smem_fraction}) {
          EXPECT_GE(fraction, 0);
          EXPECT_LE(fraction, 1 + kExact) << blocks << " x " << threads << " x " << registers;
        }
      }
    }
  }
}

}  // namespace
}  // namespace opara
