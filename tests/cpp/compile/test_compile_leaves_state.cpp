// What compile() does with state, on both devices: compiling never advances it (whatever the
// options: every memory protection, the CPU tuner, a cache read where it lives); and under torch.inference_mode() a
// model with state compiles, runs there, and its own buffers stay writable outside it. The GPU twins are skipped
// without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/serialization/import.h>

#include <string>
#include <vector>

#include "exec/own_buffers.h"
#include "model_files.h"
#include "opara/compiled_model.h"

namespace opara {
namespace {

const c10::Device kGpu(c10::kCUDA, 0);

Options on(c10::Device device) {
  Options options;
  options.device = device;
  options.cpu.tuning_ms = 0;
  return options;
}

// Each way a compile on `device` may run the model for itself.
std::vector<std::pair<std::string, Options>> compile_variants(c10::Device device) {
  std::vector<std::pair<std::string, Options>> variants;
  if (device.is_cpu()) {
    Options tuned = on(device);
    tuned.cpu.tuning_ms = 50;
    variants.emplace_back("untuned", on(device));
    variants.emplace_back("tuned", tuned);
    return variants;
  }
  for (MemoryProtection memory :
       {MemoryProtection::kRecordStream, MemoryProtection::kKeepAlive, MemoryProtection::kSmallerPool}) {
    Options options = on(device);
    options.cuda.memory = memory;
    variants.emplace_back(to_string(memory), options);
  }
  return variants;
}

// A counter buffer is where the file left it after compile, with every option; the first call
// counts 1, as eager's does.
void expect_counter_left_at_zero(c10::Device device) {
  const at::Tensor x = at::randn({2, 3});
  for (const auto& form : {"counter.pt2", "counter_functional.pt2"}) {
    for (const auto& [name, options] : compile_variants(device)) {
      SCOPED_TRACE(std::string(form) + ", " + name);
      torch::jit::Module reference = torch::jit::load(testing::fixture_path("counter.pt"));
      const CompiledModel compiled = compile(testing::fixture_path(form), {x.to(device)}, options);
      EXPECT_EQ(compiled.state().at(0).second.item<int64_t>(), 0) << "compiling advanced the counter";
      const at::Tensor expected = reference.forward({x}).toTensor();
      EXPECT_TRUE(at::allclose(compiled.run({x.to(device)}).at(0).cpu(), expected, 1e-5, 1e-5));
      EXPECT_EQ(compiled.state().at(0).second.item<int64_t>(), 1);
    }
  }
}

// A cache the caller gives, read and written where it lives (a static input; on CUDA also with
// state_in_place), holds the caller's values after compile.
void expect_cache_read_in_place_left_as_given(c10::Device device) {
  const at::Tensor x = at::randn({1, 4});
  const at::Tensor first_cache = at::randn({5, 4});
  std::vector<std::pair<std::string, Options>> variants = compile_variants(device);
  if (device.is_cuda()) {
    Options in_place = on(device);
    in_place.state_in_place = true;
    variants.emplace_back("state_in_place", in_place);
  }
  for (auto& [name, options] : variants) {
    SCOPED_TRACE(name);
    if (!options.state_in_place) options.static_inputs = {1};
    const at::Tensor cache = first_cache.to(device, /*non_blocking=*/false, /*copy=*/true);
    const CompiledModel compiled =
        compile(testing::fixture_path("cache_update.pt2"), {x.to(device), cache, at::tensor({2L}).to(device)}, options);
    ASSERT_THAT(compiled.static_inputs(), ::testing::Contains(1)) << "the cache is not read where it lives";
    EXPECT_TRUE(at::equal(cache.cpu(), first_cache)) << "compiling wrote the caller's cache";
    compiled.run({x.to(device), cache, at::tensor({3L}).to(device)});
    at::Tensor expected = first_cache.clone();
    expected[3] = x[0];
    EXPECT_TRUE(at::equal(cache.cpu(), expected)) << "the first call's write";
  }
}

// Under inference mode the caller's cache is an inference tensor: compile and run write it there.
// The model's own state buffers are ordinary tensors, so a call outside inference mode writes them.
void expect_inference_mode_state(c10::Device device) {
  const at::Tensor x = at::randn({1, 4});
  const at::Tensor first_cache = at::randn({5, 4});
  Options options = on(device);
  options.static_inputs = {1};
  {
    const c10::InferenceMode inference;
    const at::Tensor cache = first_cache.to(device, /*non_blocking=*/false, /*copy=*/true);
    ASSERT_TRUE(cache.is_inference());
    const CompiledModel compiled =
        compile(testing::fixture_path("cache_update.pt2"), {x.to(device), cache, at::tensor({2L}).to(device)}, options);
    EXPECT_TRUE(at::equal(cache.cpu(), first_cache)) << "compiling wrote the caller's cache";
    compiled.run({x.to(device), cache, at::tensor({0L}).to(device)});
    at::Tensor expected = first_cache.clone();
    expected[0] = x[0];
    EXPECT_TRUE(at::equal(cache.cpu(), expected));
  }
  CompiledModel counter = [&] {
    const c10::InferenceMode inference;
    return compile(testing::fixture_path("counter.pt2"), {at::randn({2, 3}).to(device)}, on(device));
  }();
  EXPECT_FALSE(counter.state().at(0).second.is_inference()) << "a state buffer made as an inference tensor";
  counter.run({at::randn({2, 3}).to(device)});  // outside inference mode: writes the buffer
  {
    const c10::InferenceMode inference;
    counter.run({at::randn({2, 3}).to(device)});
  }
  EXPECT_EQ(counter.state().at(0).second.item<int64_t>(), 2);
}

TEST(CompileLeavesState, ACounterStartsAtZeroWhateverTheOptionsOnTheCpu) {
  expect_counter_left_at_zero(c10::kCPU);
}

TEST(CompileLeavesState, OnTheGpuACounterStartsAtZeroWhateverTheOptions) {
  OPARA_REQUIRE_GPU();
  expect_counter_left_at_zero(kGpu);
}

TEST(CompileLeavesState, ACacheReadWhereItLivesKeepsTheCallersValuesOnTheCpu) {
  expect_cache_read_in_place_left_as_given(c10::kCPU);
}

TEST(CompileLeavesState, OnTheGpuACacheReadWhereItLivesKeepsTheCallersValues) {
  OPARA_REQUIRE_GPU();
  expect_cache_read_in_place_left_as_given(kGpu);
}

TEST(CompileLeavesState, UnderInferenceModeStateCompilesAndRunsOnTheCpu) {
  expect_inference_mode_state(c10::kCPU);
}

TEST(CompileLeavesState, OnTheGpuUnderInferenceModeStateCompilesAndRuns) {
  OPARA_REQUIRE_GPU();
  expect_inference_mode_state(kGpu);
}

TEST(CompileLeavesState, OwnBuffersAreOrdinaryTensorsUnderInferenceMode) {
  const c10::InferenceMode inference;
  const at::Tensor made_here = at::ones({3});
  ASSERT_TRUE(made_here.is_inference());
  const at::Tensor own = own_copy(made_here);
  EXPECT_FALSE(own.is_inference());
  EXPECT_TRUE(at::equal(own, made_here));
  EXPECT_FALSE(made_as_own_buffers([] { return at::zeros({2}); }).is_inference());
  EXPECT_TRUE(at::zeros({2}).is_inference()) << "the caller's mode is back after the buffers are made";
}

}  // namespace
}  // namespace opara
