// What compile() and graph sets rely on from a capture pool: a pool named by its id is the one
// object (its streams and its reference), captures of any plan size share one list of streams
// (the origin first), and runs in turn follow each other on the device. Skipped without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include "model_files.h"
#include "runtime/cuda/capture_pool.h"
#include "runtime/cuda/graph_capture.h"

namespace opara {
namespace {

static_assert(is_null_pool_id({0, 0}) && !is_null_pool_id({0, 1}) && !is_null_pool_id({1, 0}));
static_assert(CapturePool::streams_for(3) == 4, "a plan's streams and the origin");

TEST(CapturePoolCuda, CompilesNamingOnePoolShareOneObjectAndItsReference) {
  OPARA_REQUIRE_GPU();
  const std::shared_ptr<CapturePool> pool = CapturePool::create(0);
  EXPECT_FALSE(is_null_pool_id(pool->id()));
  const std::shared_ptr<CapturePool> found = CapturePool::find_or_create(0, pool->id());
  EXPECT_EQ(found, pool);
  EXPECT_EQ(c10::cuda::CUDACachingAllocator::getPoolUseCount(0, pool->id()), 1);
  const std::shared_ptr<CapturePool> own = CapturePool::find_or_create(0, {0, 0});
  EXPECT_NE(own, pool) << "a null id names no pool: a new one";
}

TEST(CapturePoolCuda, CapturesOfAnySizeGetPrefixesOfOneListOfStreams) {
  OPARA_REQUIRE_GPU();
  const std::shared_ptr<CapturePool> pool = CapturePool::create(0);
  const std::vector<c10::cuda::CUDAStream> small = pool->capture_streams(2);
  const std::vector<c10::cuda::CUDAStream> large = pool->capture_streams(5);
  const std::vector<c10::cuda::CUDAStream> again = pool->capture_streams(3);
  ASSERT_EQ(small.size(), 3u);
  ASSERT_EQ(large.size(), 6u);
  ASSERT_EQ(again.size(), 4u);
  for (std::size_t k = 0; k < small.size(); ++k) EXPECT_EQ(small[k], large[k]) << "stream " << k;
  for (std::size_t k = 0; k < again.size(); ++k) EXPECT_EQ(again[k], large[k]) << "stream " << k;
  pool->discard_streams();
  const std::vector<c10::cuda::CUDAStream> fresh = pool->capture_streams(2);
  for (const auto& stream : fresh) {
    EXPECT_THAT(large, ::testing::Not(::testing::Contains(stream))) << "a discarded stream was lent again";
  }
}

TEST(CapturePoolCuda, RunsInTurnFollowEachOtherAcrossStreams) {
  OPARA_REQUIRE_GPU();
  const std::shared_ptr<CapturePool> pool = CapturePool::create(0);
  at::Tensor value = at::zeros({1 << 20}, at::kCUDA);
  // Filled on the current stream, which nothing orders before the pool streams' turns.
  c10::cuda::getCurrentCUDAStream(0).synchronize();
  const c10::cuda::CUDAStream first = c10::cuda::getStreamFromPool(false, 0);
  const c10::cuda::CUDAStream second = c10::cuda::getStreamFromPool(false, 0);
  {
    const c10::cuda::CUDAStreamGuard on(first);
    pool->run_in_turn([&] {
      for (int k = 0; k < 50; ++k) value.add_(1);
    });
  }
  at::Tensor seen;
  {
    const c10::cuda::CUDAStreamGuard on(second);
    pool->run_in_turn([&] { seen = value.clone(); });  // waits for the first turn's work
  }
  second.synchronize();
  EXPECT_TRUE(at::equal(seen.cpu(), at::full({1 << 20}, 50.0))) << "the second turn did not wait for the first";
}

// The allocators keep a pool released by its last holder, at no reference, until they empty their
// cache, and assert when it is taken again: an id named again then gets a fresh pool, which later
// names share.
TEST(CapturePoolCuda, AnIdNamedAgainAfterItsLastPoolIsGoneGetsAFreshPool) {
  OPARA_REQUIRE_GPU();
  const c10::MempoolId_t named = at::cuda::graph_pool_handle();
  const auto capture_into = [](CapturePool& pool) {
    const std::vector<c10::cuda::CUDAStream> streams = pool.capture_streams(0);
    const c10::cuda::CUDAStreamGuard guard(streams[0]);
    GraphCapture capture(pool, streams[0].stream());
    const at::Tensor doubled = at::ones({1 << 16}, at::kCUDA) * 2;
    const std::unique_ptr<InspectableGraph> graph = capture.end();
    graph->instantiate();
    graph->replay();
    streams[0].synchronize();
  };
  {
    const std::shared_ptr<CapturePool> first = CapturePool::find_or_create(0, named);
    EXPECT_EQ(first->id(), named);
    capture_into(*first);
  }
  const std::shared_ptr<CapturePool> again = CapturePool::find_or_create(0, named);
  EXPECT_NE(again->id(), named);
  EXPECT_EQ(c10::cuda::CUDACachingAllocator::getPoolUseCount(0, again->id()), 1);
  capture_into(*again);
  EXPECT_EQ(CapturePool::find_or_create(0, named), again) << "the id names the live pool again";
}

}  // namespace
}  // namespace opara
