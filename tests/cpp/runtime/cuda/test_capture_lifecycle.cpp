// A capture whose begin fails after CUDAGraph::capture_begin registered its pool with the caching
// allocators leaves them as they were: the pool's reference count is back where it was, and the
// pool takes a new capture (a registration left behind would refuse it: "already recording").
// Skipped without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/cuda.h>

#include "model_files.h"
#include "runtime/cuda/capture_lifecycle.h"
#include "runtime/cuda/cuda_streams.h"

namespace opara {
namespace {

namespace allocator = c10::cuda::CUDACachingAllocator;

void end_any_capture(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    (void)cudaStreamEndCapture(stream, &graph);
    if (graph) (void)cudaGraphDestroy(graph);
  }
  (void)cudaGetLastError();
}

TEST(CaptureLifecycleCuda, ABeginThatFailsLeavesTheAllocatorsAsTheyWere) {
  OPARA_REQUIRE_GPU();
  const c10::DeviceIndex device = 0;
  const c10::MempoolId_t pool = at::cuda::graph_pool_handle();
  allocator::createOrIncrefPool(device, pool);  // held by the test, so that its count can be read
  ASSERT_EQ(allocator::getPoolUseCount(device, pool), 1);
  const StreamLease streams(device, 1);
  const cudaStream_t stream = streams[0].stream();
  {
    const c10::cuda::CUDAStreamGuard guard(streams[0]);
    // Another capture under way on the stream: cudaStreamBeginCapture refuses a second one, after
    // capture_begin has registered the pool with both allocators.
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), cudaSuccess);
    InspectableGraph graph(/*keep_graph=*/true);
    EXPECT_ANY_THROW({ const auto turn = begin_capture(graph, pool, device, stream); });
    end_any_capture(stream);
  }
  EXPECT_EQ(allocator::getPoolUseCount(device, pool), 1) << "the failed begin kept a reference to the pool";
  {
    const c10::cuda::CUDAStreamGuard guard(streams[0]);
    InspectableGraph graph(/*keep_graph=*/true);
    {
      const auto turn = begin_capture(graph, pool, device, stream);  // refused if the failed one were still recorded
      const at::Tensor doubled = at::ones({16}, at::kCUDA) * 2;
      graph.capture_end();
    }
    graph.replay();
    streams[0].synchronize();
  }
  EXPECT_EQ(allocator::getPoolUseCount(device, pool), 1);
  allocator::releasePool(device, pool);
}

}  // namespace
}  // namespace opara
