// The streams a capture forks: a Plan of 64 or 80 streams gets that many distinct CUDA streams
// (c10's pool has 32 per priority and would hand one out twice), none of them the default stream
// (capture cannot fork from it), and a finished lease's streams are lent again. Skipped without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>

#include <set>

#include "model_files.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/stream_lease.h"

namespace opara {
namespace {

using ::testing::ContainerEq;

std::set<cudaStream_t> handles_of(const StreamLease& lease) {
  std::set<cudaStream_t> handles;
  for (std::size_t k = 0; k < lease.size(); ++k) handles.insert(lease[k].stream());
  return handles;
}

TEST(StreamLeaseCuda, SixtyFourAndEightyStreamsAreDistinctAndNoneIsTheDefault) {
  OPARA_REQUIRE_GPU();
  const cudaStream_t default_stream = c10::cuda::getDefaultCUDAStream(0).stream();
  for (std::size_t count : {64u, 80u}) {
    const StreamLease lease(0, count);
    ASSERT_EQ(lease.size(), count);
    const std::set<cudaStream_t> handles = handles_of(lease);
    EXPECT_EQ(handles.size(), count) << "of " << count << " streams, some are one";
    for (cudaStream_t handle : {cudaStream_t{nullptr}, cudaStreamLegacy, cudaStreamPerThread, default_stream}) {
      EXPECT_EQ(handles.count(handle), 0u) << count << " streams: one is the default or legacy stream";
    }
    for (std::size_t k = 0; k < lease.size(); ++k) EXPECT_EQ(lease[k].device_index(), 0);
  }
}

// Two models alive at once hold two leases: they share no stream (and so no cuBLAS workspace).
TEST(StreamLeaseCuda, LeasesHeldAtOnceShareNoStream) {
  OPARA_REQUIRE_GPU();
  const StreamLease first(0, 40);
  const StreamLease second(0, 40);
  std::set<cudaStream_t> both = handles_of(first);
  const std::set<cudaStream_t> theirs = handles_of(second);
  both.insert(theirs.begin(), theirs.end());
  EXPECT_EQ(both.size(), 80u);
}

// Compiling model after model creates no stream after the first: a lease that ends lends its streams again.
TEST(StreamLeaseCuda, AFinishedLeasesStreamsAreLentAgain) {
  OPARA_REQUIRE_GPU();
  std::set<cudaStream_t> before;
  {
    const StreamLease lease(0, 80);
    before = handles_of(lease);
  }
  const StreamLease again(0, 80);
  EXPECT_THAT(handles_of(again), ContainerEq(before));
}

// What a benchmark relies on to charge no cuBLAS workspace to a mode: after warming, the streams
// the next lease gets already have theirs, so a matrix product on each allocates nothing that
// outlives it.
TEST(StreamLeaseCuda, WarmedStreamsMakeNoWorkspaceWhenLentAgain) {
  OPARA_REQUIRE_GPU();
  const std::size_t count = 6;
  (void)warm_idle_streams(0, count);
  const StreamLease lease(0, count);
  const auto options = at::TensorOptions().device(c10::kCUDA).dtype(at::kFloat);
  const at::Tensor a = at::ones({64, 64}, options);
  const at::Tensor bias = at::ones({64}, options);
  torch::cuda::synchronize();
  const std::size_t before = allocated_bytes(0);
  for (std::size_t k = 0; k < lease.size(); ++k) {
    const c10::cuda::CUDAStreamGuard on(lease[k]);
    (void)at::mm(a, a);
    (void)at::addmm(bias, a, a);
    lease[k].synchronize();
  }
  EXPECT_EQ(allocated_bytes(0), before) << "a lent stream made a workspace the warming should have made";
}

}  // namespace
}  // namespace opara
