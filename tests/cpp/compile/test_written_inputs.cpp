// A model that writes its inputs in place: compiling it leaves the caller's examples alone, and
// each run writes the caller's tensors once, as eager PyTorch does. On a GPU (skipped without one)
// the warm-up runs before capture do not count either: the host step between the graphs sees the
// values one run makes, so its result fits the captured graphs and no run falls back to eager.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/cuda.h>

#include <filesystem>
#include <string>
#include <vector>

#include "model_files.h"
#include "opara/compiled_model.h"
#include "tools/reference_forward.h"

namespace opara {
namespace {

// x in place, y through a view of it; nonzero needs the host (a host step on a GPU) and its count
// depends on the written x.
constexpr const char* kWritesItsInputs = R"(
def forward(self, x, y):
    x.add_(1.0)
    y[0].mul_(2.0)
    above = torch.nonzero(x > 2.5).size(0)
    return x * 2.0 + y.sum() + above
)";

std::string saved_model() {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "opara_writes_its_inputs.pt";
  torch::jit::Module module("WritesItsInputs");
  module.define(kWritesItsInputs);
  module.save(path.string());
  return path.string();
}

struct Inputs {
  at::Tensor x = at::linspace(0, 3, 8);
  at::Tensor y = at::arange(6, at::kFloat).reshape({2, 3});
};

// What the module does to its inputs in one run, and what it returns.
struct OneRun {
  at::Tensor x;
  at::Tensor y;
  at::Tensor output;
};

OneRun expected_run(const std::string& path, const at::Tensor& x, const at::Tensor& y) {
  OneRun run{x.cpu().clone(), y.cpu().clone(), {}};
  run.x.add_(1.0);
  run.y[0].mul_(2.0);
  run.output = torchscript_forward(path, {x.cpu(), y.cpu()}).at(0);  // on copies
  return run;
}

// Each round starts from the same inputs: a round on what the last one wrote would change the
// nonzero count, which on a GPU sends the rest of the run to eager (the graphs after the host
// step were captured for the first count).
void expect_runs_like_eager(const CompiledModel& compiled, const std::string& path, const Inputs& inputs) {
  const Inputs first{inputs.x.clone(), inputs.y.clone()};
  for (int round = 0; round < 3; ++round) {
    inputs.x.copy_(first.x);
    inputs.y.copy_(first.y);
    const OneRun expected = expected_run(path, inputs.x, inputs.y);
    const std::vector<at::Tensor> outputs = compiled.run({inputs.x, inputs.y});
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_TRUE(at::equal(outputs[0].cpu(), expected.output)) << "run " << round;
    EXPECT_TRUE(at::equal(inputs.x.cpu(), expected.x)) << "x after run " << round;
    EXPECT_TRUE(at::equal(inputs.y.cpu(), expected.y)) << "y after run " << round;
  }
}

TEST(WrittenInputs, CompilingLeavesTheExamplesAloneAndEachCpuRunWritesThemOnce) {
  const std::string path = saved_model();
  Inputs examples;
  const Inputs before{examples.x.clone(), examples.y.clone()};
  Options options;
  options.device = c10::kCPU;
  const CompiledModel compiled = compile(path, {examples.x, examples.y}, options);
  EXPECT_TRUE(at::equal(examples.x, before.x));
  EXPECT_TRUE(at::equal(examples.y, before.y));
  expect_runs_like_eager(compiled, path, examples);
}

TEST(WrittenInputs, OnTheGpuWarmUpsDoNotCountAndTheCallersTensorsAreWritten) {
  OPARA_REQUIRE_GPU();
  const std::string path = saved_model();
  Inputs examples;
  examples.x = examples.x.cuda();
  examples.y = examples.y.cuda();
  const Inputs before{examples.x.clone(), examples.y.clone()};
  Options options;
  options.device = c10::Device(c10::kCUDA, 0);
  options.cuda.warmup_runs = 3;  // each would add 1 to x again if it counted
  const CompiledModel compiled = compile(path, {examples.x, examples.y}, options);
  EXPECT_TRUE(at::equal(examples.x, before.x));
  EXPECT_TRUE(at::equal(examples.y, before.y));
  EXPECT_GE(compiled.stats().segments, 3u) << "nonzero should be a host step between two graphs";
  expect_runs_like_eager(compiled, path, examples);
  EXPECT_EQ(compiled.stats().eager_fallbacks, 0u);
}

}  // namespace
}  // namespace opara
