// Inputs read where they are (Options::static_inputs: a module's weights passed as inputs, as a
// torch.compile graph takes them): runs give the model's outputs, an in-place change to the weight
// is seen by the next run, another tensor in its place is refused naming the input, one that does
// not exist is refused at compile time, and one the model writes is written where it lives, once
// per run (compiling writes nothing). On a GPU
// (skipped without one) the graph reads the weight's memory: compiling copies none of it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/cuda.h>

#include <string>

#include "model_files.h"
#include "opara/compiled_model.h"
#include "opara/error.h"

namespace opara {
namespace {

using ::testing::HasSubstr;

constexpr const char* kWeightsAsInputs = R"(
def forward(self, x, weight, bias):
    return torch.relu(torch.addmm(bias, x, weight)) + torch.sigmoid(torch.mm(x, weight))
)";

constexpr const char* kWritesItsWeight = R"(
def forward(self, x, weight):
    weight.mul_(2.0)
    return torch.mm(x, weight)
)";

// A long chain of matmuls, then a write into the cache: a run still replaying when the next call
// comes writes the cache last.
constexpr const char* kSlowThenWritesItsCache = R"(
def forward(self, x, w, cache):
    y = torch.mm(torch.mm(torch.mm(torch.mm(torch.mm(torch.mm(x, w), w), w), w), w), w)
    cache.add_(y.sum())
    return y
)";

at::Tensor expected(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return at::relu(at::addmm(bias, x, weight)) + at::sigmoid(at::mm(x, weight));
}

std::string compile_error(const std::string& path, const std::vector<at::Tensor>& inputs, const Options& options) {
  try {
    compile(path, inputs, options);
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

Options static_options(c10::Device device, std::vector<int> static_inputs) {
  Options options;
  options.device = device;
  options.cpu.tuning_ms = 0;
  options.static_inputs = std::move(static_inputs);
  return options;
}

void expect_weights_read_where_they_are(c10::Device device) {
  const std::string path = testing::saved_module("weights_as_inputs", kWeightsAsInputs);
  const auto on = at::TensorOptions().device(device);
  const at::Tensor x = at::randn({4, 16}, on);
  const at::Tensor weight = at::randn({16, 8}, on);
  const at::Tensor bias = at::randn({8}, on);
  const CompiledModel compiled = compile(path, {x, weight, bias}, static_options(device, {1, 2}));
  EXPECT_TRUE(at::allclose(compiled.run({x, weight, bias}).at(0), expected(x, weight, bias)));
  weight.mul_(-1.5);  // in place, as load_state_dict does
  const at::Tensor other_x = at::randn({4, 16}, on);
  EXPECT_TRUE(at::allclose(compiled.run({other_x, weight, bias}).at(0), expected(other_x, weight, bias)))
      << "the run did not read the weight where it is";
  try {
    compiled.run({x, weight.clone(), bias});
    ADD_FAILURE() << "another tensor in a static input's place was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("input 1 ('weight.1') is static"));
    EXPECT_THAT(error.what(), HasSubstr("compile again"));
  }
}

TEST(StaticInputs, AWeightIsReadWhereItIsOnTheCpu) {
  expect_weights_read_where_they_are(c10::kCPU);
}

// `param.data = other` gives the caller's tensor new memory: the compiled model kept the memory it
// compiled against alive, and refuses the tensor now (another storage) rather than read a freed block.
TEST(StaticInputs, ATensorGivenNewMemoryIsAnotherTensor) {
  const std::string path = testing::saved_module("weights_as_inputs", kWeightsAsInputs);
  const at::Tensor x = at::randn({4, 16});
  at::Tensor weight = at::randn({16, 8});
  const at::Tensor bias = at::randn({8});
  const CompiledModel compiled = compile(path, {x, weight, bias}, static_options(c10::kCPU, {1, 2}));
  weight.set_(at::randn({16, 8}));
  try {
    compiled.run({x, weight, bias});
    ADD_FAILURE() << "a static input given new memory was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("is static"));
  }
}

TEST(StaticInputs, OnesThatDoNotExistAreRefused) {
  const at::Tensor x = at::randn({4, 16});
  const at::Tensor weight = at::randn({16, 8});
  EXPECT_THAT(compile_error(testing::saved_module("weights_as_inputs", kWeightsAsInputs), {x, weight, at::randn({8})},
                            static_options(c10::kCPU, {3})),
              HasSubstr("static input 3 does not exist; the model takes 3 inputs"));
}

void expect_a_written_static_input_written_where_it_lives(c10::Device device) {
  const auto on = at::TensorOptions().device(device);
  const at::Tensor x = at::randn({4, 16}, on);
  const at::Tensor weight = at::randn({16, 8}, on);
  const at::Tensor first = weight.clone();
  const CompiledModel compiled =
      compile(testing::saved_module("writes_its_weight", kWritesItsWeight), {x, weight}, static_options(device, {1}));
  EXPECT_TRUE(at::equal(weight, first)) << "compiling wrote the caller's tensor";
  for (int run = 1; run <= 3; ++run) {
    const at::Tensor output = compiled.run({x, weight}).at(0);
    const at::Tensor expected_weight = first * static_cast<double>(1 << run);
    EXPECT_TRUE(at::allclose(weight, expected_weight)) << "after run " << run;
    EXPECT_TRUE(at::allclose(output, at::mm(x, expected_weight), 1e-4, 1e-4)) << "run " << run;
  }
  EXPECT_EQ(compiled.static_inputs(), std::vector<int>{1});
}

// A new cache per request (transformers' generate()): once the caller has dropped the tensor the
// model was compiled on, a new one of the same layout takes its memory instead of a new compile;
// while the old one is held, the new one is refused and left as it was.
void expect_a_new_state_tensor_adopted_once_the_old_is_dropped(c10::Device device) {
  const auto on = at::TensorOptions().device(device);
  const at::Tensor x = at::randn({4, 16}, on);
  at::Tensor weight = at::randn({16, 8}, on);
  const CompiledModel compiled =
      compile(testing::saved_module("writes_its_weight", kWritesItsWeight), {x, weight}, static_options(device, {1}));
  compiled.run({x, weight});
  const void* compiled_on = weight.data_ptr();
  const at::Tensor other = at::randn({16, 8}, on);
  const at::Tensor other_first = other.clone();
  EXPECT_FALSE(compiled.adopt_state({x, other}));
  EXPECT_THROW(compiled.run({x, other}), Error);
  EXPECT_TRUE(at::equal(other, other_first)) << "a refused tensor was written";
  weight = at::Tensor();  // the caller drops the first one
  const at::Tensor output = compiled.run({x, other}).at(0);
  EXPECT_EQ(other.data_ptr(), compiled_on) << "the new tensor does not share the memory compiled on";
  EXPECT_TRUE(at::allclose(other, other_first * 2.0));
  EXPECT_TRUE(at::allclose(output, at::mm(x, other_first * 2.0), 1e-4, 1e-4));
}

TEST(StaticInputs, ANewTensorForOneTheModelWritesIsAdoptedOnceTheOldIsDroppedOnTheCpu) {
  expect_a_new_state_tensor_adopted_once_the_old_is_dropped(c10::kCPU);
}

TEST(StaticInputs, OnTheGpuANewTensorForOneTheModelWritesIsAdoptedOnceTheOldIsDropped) {
  OPARA_REQUIRE_GPU();
  expect_a_new_state_tensor_adopted_once_the_old_is_dropped(c10::Device(c10::kCUDA, 0));
}

// Adopting a new cache waits for the last run, made on another stream and still replaying: its
// write into the memory the new cache takes over comes before the new values, not after them.
TEST(StaticInputs, OnTheGpuAdoptingANewCacheWaitsForTheRunStillInFlight) {
  OPARA_REQUIRE_GPU();
  const c10::Device cuda(c10::kCUDA, 0);
  const auto on = at::TensorOptions().device(cuda);
  const at::Tensor x = at::randn({4096, 4096}, on) / 64;
  const at::Tensor w = at::randn({4096, 4096}, on) / 64;
  at::Tensor cache = at::zeros({1024}, on);
  const CompiledModel compiled = compile(testing::saved_module("slow_then_writes", kSlowThenWritesItsCache),
                                         {x, w, cache}, static_options(cuda, {2}));
  const c10::cuda::CUDAStream first = c10::cuda::getStreamFromPool(false, 0);
  const c10::cuda::CUDAStream second = c10::cuda::getStreamFromPool(false, 0);
  torch::cuda::synchronize();
  for (int round = 0; round < 5; ++round) {
    {
      const c10::cuda::CUDAStreamGuard guard(first);
      compiled.run({x, w, cache});  // still replaying when the host goes on
    }
    cache = at::Tensor();  // the caller drops it, and brings a new cache for the next request
    at::Tensor fresh;
    at::Tensor next;
    at::Tensor output;
    {
      const c10::cuda::CUDAStreamGuard guard(second);
      fresh = at::full({1024}, 3.0, on);
      next = fresh.clone();
      output = compiled.run({x, w, next}).at(0);
    }
    torch::cuda::synchronize();
    const at::Tensor expected_cache = fresh + output.sum();
    EXPECT_TRUE(at::allclose(next, expected_cache, 1e-3, 1e-2)) << "round " << round
                                                                << ": the earlier run's write "
                                                                   "landed after the adopted values";
    cache = next;
  }
}

TEST(StaticInputs, OneTheModelWritesIsWrittenWhereItLivesOnTheCpu) {
  expect_a_written_static_input_written_where_it_lives(c10::kCPU);
}

TEST(StaticInputs, OnTheGpuOneTheModelWritesIsWrittenWhereItLives) {
  OPARA_REQUIRE_GPU();
  expect_a_written_static_input_written_where_it_lives(c10::Device(c10::kCUDA, 0));
}

TEST(StaticInputs, OnTheGpuAWeightIsReadWhereItIsAndNotCopied) {
  OPARA_REQUIRE_GPU();
  const c10::Device cuda(c10::kCUDA, 0);
  expect_weights_read_where_they_are(cuda);
  // 1 GiB of weight and little else: a copy of it would show in what compiling allocates (which
  // also holds a cuBLAS workspace per stream, 32 MiB each on Hopper).
  const std::string path = testing::saved_module("weights_as_inputs", kWeightsAsInputs);
  const auto on = at::TensorOptions().device(cuda);
  const at::Tensor x = at::randn({2, 16384}, on);
  const at::Tensor weight = at::randn({16384, 16384}, on);
  const at::Tensor bias = at::randn({16384}, on);
  torch::cuda::synchronize();
  const auto allocated = [] { return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current; };
  const auto before = allocated();
  const CompiledModel compiled = compile(path, {x, weight, bias}, static_options(cuda, {1, 2}));
  torch::cuda::synchronize();
  EXPECT_LT(allocated() - before, std::int64_t{512} << 20) << "compiling copied the weight";
  EXPECT_TRUE(at::allclose(compiled.run({x, weight, bias}).at(0), expected(x, weight, bias), 1e-3, 1e-3));
  // A static input must be where the model runs: it is read there, never moved.
  EXPECT_THAT(compile_error(path, {x, weight.cpu(), bias}, static_options(cuda, {1})),
              HasSubstr("static input 1 ('weight.1') is on cpu, the model runs on cuda:0"));
}

}  // namespace
}  // namespace opara
