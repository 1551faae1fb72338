// A capture whose begin fails after CUDAGraph::capture_begin registered its pool with the caching
// allocators (in cudaStreamBeginCapture) leaves them as they were: the pool's reference count is back where it was, and
// the pool takes a new capture (a registration left behind would refuse it: "already recording"). Skipped without a
// GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/cuda.h>

#include "model_files.h"
#include "runtime/cuda/capture_pool.h"
#include "runtime/cuda/graph_capture.h"

namespace opara {
namespace {

namespace allocator = c10::cuda::CUDACachingAllocator;

// Not a capture mode: cudaStreamBeginCapture, the last step of CUDAGraph::capture_begin, refuses
// it, after the generators and both allocators took the capture in. (A stream already capturing
// would fail earlier, in the generator's registration, and ~CUDAGraph would then terminate.)
constexpr auto kNotACaptureMode = static_cast<cudaStreamCaptureMode>(99);

TEST(GraphCaptureCuda, ABeginThatFailsLeavesTheAllocatorsAsTheyWere) {
  OPARA_REQUIRE_GPU();
  const c10::DeviceIndex device = 0;
  const std::shared_ptr<CapturePool> pool = CapturePool::create(device);
  ASSERT_EQ(allocator::getPoolUseCount(device, pool->id()), 1) << "the capture pool holds one reference";
  std::vector<c10::cuda::CUDAStream> streams = pool->capture_streams(0);
  const cudaStream_t stream = streams[0].stream();
  {
    const c10::cuda::CUDAStreamGuard guard(streams[0]);
    try {
      GraphCapture capture(*pool, stream, kNotACaptureMode);
      ADD_FAILURE() << "a capture began in an invalid mode";
    } catch (const c10::Error& error) {
      EXPECT_THAT(error.what_without_backtrace(), ::testing::HasSubstr("invalid argument"))
          << "the begin failed before cudaStreamBeginCapture, so the allocators were not reached";
    }
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    ASSERT_EQ(cudaStreamIsCapturing(stream, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  }
  EXPECT_EQ(allocator::getPoolUseCount(device, pool->id()), 1) << "the failed begin kept a reference to the pool";
  streams = pool->capture_streams(0);
  EXPECT_NE(streams[0].stream(), stream) << "a stream of the failed capture was lent again";
  {
    const c10::cuda::CUDAStreamGuard guard(streams[0]);
    GraphCapture capture(*pool, streams[0].stream());  // refused if the failed one were still recorded
    const at::Tensor doubled = at::ones({16}, at::kCUDA) * 2;
    const std::unique_ptr<InspectableGraph> graph = capture.end();
    ASSERT_NE(graph->raw_cuda_graph(), nullptr);  // kept (keep_graph), so the capture ended
    graph->instantiate();
    graph->replay();
    streams[0].synchronize();
  }
  EXPECT_EQ(allocator::getPoolUseCount(device, pool->id()), 1) << "the ended graph kept a reference to the pool";
}

// A capture that fails part-way (here: the caller gives up) and is abandoned leaves the pool as
// it was, and the next capture into it goes through.
TEST(GraphCaptureCuda, AnAbandonedCaptureLeavesThePoolAsItWas) {
  OPARA_REQUIRE_GPU();
  const c10::DeviceIndex device = 0;
  const std::shared_ptr<CapturePool> pool = CapturePool::create(device);
  {
    const std::vector<c10::cuda::CUDAStream> streams = pool->capture_streams(0);
    const c10::cuda::CUDAStreamGuard guard(streams[0]);
    GraphCapture capture(*pool, streams[0].stream());
    const at::Tensor doubled = at::ones({16}, at::kCUDA) * 2;
    capture.abandon();
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    ASSERT_EQ(cudaStreamIsCapturing(streams[0].stream(), &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusNone) << "the abandoned capture is still under way";
  }
  EXPECT_EQ(allocator::getPoolUseCount(device, pool->id()), 1);
  const std::vector<c10::cuda::CUDAStream> streams = pool->capture_streams(0);
  const c10::cuda::CUDAStreamGuard guard(streams[0]);
  GraphCapture capture(*pool, streams[0].stream());
  const at::Tensor tripled = at::ones({16}, at::kCUDA) * 3;
  EXPECT_NO_THROW((void)capture.end());
}

}  // namespace
}  // namespace opara
