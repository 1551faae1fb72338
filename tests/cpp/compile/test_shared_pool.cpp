// The graphs of one model share one memory pool and one set of capture streams, so a graph
// captured after a host step reuses the blocks the graph before it freed (the caching allocator
// reuses a block only on the stream that allocated it). GPU only; skipped without one.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/cuda.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "model_files.h"
#include "opara/compiled_model.h"
#include "tools/reference_forward.h"

namespace opara {
namespace {

// Two graphs around a host step (nonzero), each with two 16 MiB intermediates alive at once and
// nothing else big. No reduction over them: sum(0) of one takes a scratch buffer for its partial
// sums whose size depends on the GPU (32 MiB on an H100), which made the first graph alone 66 MiB.
constexpr const char* kTwoBigGraphs = R"(
def forward(self, x):
    doubled = x.repeat(256, 1) * 2.0
    above = torch.nonzero(doubled[-1] > 0.0).size(0)
    shifted = (x * above).repeat(256, 1) + 1.0
    return shifted[0] + shifted[-1]
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

// Big intermediates, so that two models in one pool reuse each other's blocks.
constexpr const char* kBigIntermediates = R"(
def forward(self, x, w):
    h = torch.relu(torch.mm(x, w))
    g = torch.sigmoid(torch.mm(h, w))
    return torch.mm(g + h, w).sum(0)
)";

// 16 MiB of random values on cuda:0: intermediates of the model above are that size too.
at::Tensor big_cuda_tensor() {
  return at::randn({2048, 2048}, at::TensorOptions().device(c10::kCUDA, 0));
}

// Options that compile on cuda:0 into one pool named anew: every model compiled with the same
// returned options shares it.
Options in_one_pool() {
  Options options;
  options.device = c10::Device(c10::kCUDA, 0);
  options.cuda.memory_pool = at::cuda::graph_pool_handle();
  return options;
}

// Two models sharing Options::cuda.memory_pool, called one after the other from two streams with
// nothing ordering them on the device: each run waits for the other's (a turn), so neither writes
// memory the other is still using, and every output is the model's.
TEST(SharedPool, ModelsSharingAPoolTakeTurnsAcrossStreams) {
  OPARA_REQUIRE_GPU();
  const std::string path = testing::saved_module("BigIntermediates", kBigIntermediates);
  const at::Tensor w = big_cuda_tensor() / 45;
  const at::Tensor x1 = big_cuda_tensor();
  const at::Tensor x2 = big_cuda_tensor() * 3;
  const Options options = in_one_pool();
  const CompiledModel first = compile(path, {x1, w}, options);
  const CompiledModel second = compile(path, {x2, w}, options);
  const at::Tensor expected1 = torchscript_forward(path, {x1.cpu(), w.cpu()}).at(0);
  const at::Tensor expected2 = torchscript_forward(path, {x2.cpu(), w.cpu()}).at(0);
  const c10::cuda::CUDAStream one = c10::cuda::getStreamFromPool(false, 0);
  const c10::cuda::CUDAStream other = c10::cuda::getStreamFromPool(false, 0);
  torch::cuda::synchronize();
  std::vector<at::Tensor> outputs1, outputs2;
  for (int round = 0; round < 10; ++round) {
    {
      const c10::cuda::CUDAStreamGuard guard(one);
      outputs1.push_back(first.run({x1, w}).at(0));
    }
    {
      const c10::cuda::CUDAStreamGuard guard(other);
      outputs2.push_back(second.run({x2, w}).at(0));
    }
  }
  torch::cuda::synchronize();
  for (std::size_t round = 0; round < outputs1.size(); ++round) {
    EXPECT_TRUE(at::allclose(outputs1[round].cpu(), expected1, 1e-2, 1e-2)) << "first model, round " << round;
    EXPECT_TRUE(at::allclose(outputs2[round].cpu(), expected2, 1e-2, 1e-2)) << "second model, round " << round;
  }
}

// A model compiled into a pool another model runs from: its warm-ups, captures and first replay
// wait for the other's runs (and those wait for them), so the running model's outputs stay its own.
TEST(SharedPool, ACompileIntoAPoolTakesTurnsWithTheModelsRunningFromIt) {
  OPARA_REQUIRE_GPU();
  const std::string path = testing::saved_module("BigIntermediates", kBigIntermediates);
  const at::Tensor w = big_cuda_tensor() / 45;
  const at::Tensor x = big_cuda_tensor();
  const Options options = in_one_pool();
  const CompiledModel serving = compile(path, {x, w}, options);
  const at::Tensor expected = torchscript_forward(path, {x.cpu(), w.cpu()}).at(0);
  std::atomic<bool> compiled{false};
  std::vector<at::Tensor> outputs;
  std::thread caller([&] {
    const c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool(false, 0));
    while (!compiled.load() || outputs.size() < 20) outputs.push_back(serving.run({x, w}).at(0));
    c10::cuda::getCurrentCUDAStream().synchronize();
  });
  const CompiledModel second = compile(path, {x * 3, w}, options);
  compiled.store(true);
  caller.join();
  for (std::size_t call = 0; call < outputs.size(); ++call) {
    EXPECT_TRUE(at::allclose(outputs[call].cpu(), expected, 1e-2, 1e-2)) << "call " << call;
  }
}

}  // namespace
}  // namespace opara
