// The graphs of one model share one memory pool and one set of capture streams, so a graph
// captured after a host step reuses the blocks the graph before it freed (the caching allocator
// reuses a block only on the stream that allocated it). GPU only; skipped without one.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <string>

#include "model_files.h"
#include "opara/compiled_model.h"
#include "tools/reference_forward.h"

namespace opara {
namespace {

// Two graphs around a host step (nonzero), each with two 16 MiB intermediates alive at once.
constexpr const char* kTwoBigGraphs = R"(
def forward(self, x):
    doubled = x.repeat(256, 1) * 2.0
    above = torch.nonzero(doubled.sum(0) > 0.0).size(0)
    shifted = (x * above).repeat(256, 1) + 1.0
    return shifted.sum(0)
)";

constexpr std::size_t kMiB = std::size_t{1} << 20;

TEST(SharedPool, TheGraphAfterAHostStepReusesTheBlocksOfTheGraphBefore) {
  OPARA_REQUIRE_GPU();
  const std::string path = testing::saved_module("TwoBigGraphs", kTwoBigGraphs);
  const at::Tensor x = at::rand({16, 1024});  // 64 KiB; repeated, 16 MiB
  Options options;
  options.device = c10::Device(c10::kCUDA, 0);
  const CompiledModel compiled = compile(path, {x.cuda()}, options);
  const CompiledStats stats = compiled.stats();
  ASSERT_EQ(stats.segments, 3u) << "nonzero should be a host step between two graphs";
  // Each graph needs 32 MiB at its peak; apart they would take 64 MiB.
  EXPECT_GE(stats.pool_bytes, 32 * kMiB);
  EXPECT_LT(stats.pool_bytes, 48 * kMiB) << "the second graph did not reuse the first one's blocks";
  const at::Tensor expected = torchscript_forward(path, {x}).at(0);
  EXPECT_TRUE(at::allclose(compiled.run({x.cuda()}).at(0).cpu(), expected, 1e-5, 1e-3));
  EXPECT_EQ(compiled.stats().eager_fallbacks, 0u);
}

}  // namespace
}  // namespace opara
