// State a model keeps between calls, from a .pt2 in both of torch.export's forms (in-place ops,
// and decomposed: a functional write listed as a BUFFER_MUTATION or USER_INPUT_MUTATION output):
// a counter buffer the compiled model keeps (CompiledModel::state), a cache input written at a
// position the call gives, and two cache buffers written one after the other. Calls give the
// scripted module's outputs and state; the write lands where the state lives, with no copy of
// it; every read of the state is ordered around the write in the plan. On a GPU (skipped without
// one) the same, captured.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/cuda.h>

#include <algorithm>
#include <string>
#include <vector>

#include "model_files.h"
#include "opara/compiled_model.h"
#include "opara/error.h"
#include "opara/load.h"
#include "opara/plan.h"

namespace opara {
namespace {

using ::testing::HasSubstr;

Options on(c10::Device device) {
  Options options;
  options.device = device;
  options.cpu.tuning_ms = 0;
  return options;
}

bool has_node(const Graph& graph, const std::string& kind) {
  return std::any_of(graph.nodes().begin(), graph.nodes().end(), [&](const Node& node) { return node.kind == kind; });
}

void expect_counter_counts_as_eager(const std::string& file, c10::Device device) {
  SCOPED_TRACE(file);
  torch::jit::Module reference = torch::jit::load(testing::fixture_path("counter.pt"));
  const at::Tensor x = at::randn({2, 3});
  const CompiledModel compiled = compile(testing::fixture_path(file), {x.to(device)}, on(device));
  ASSERT_EQ(compiled.state().size(), 1u);
  EXPECT_EQ(compiled.state()[0].first, "count");
  EXPECT_EQ(compiled.state()[0].second.item<int64_t>(), 0) << "compiling advanced the counter";
  for (int call = 1; call <= 3; ++call) {
    const at::Tensor expected = reference.forward({x}).toTensor();
    const at::Tensor output = compiled.run({x.to(device)}).at(0).cpu();
    EXPECT_TRUE(at::allclose(output, expected, 1e-5, 1e-5)) << "call " << call;
    EXPECT_EQ(compiled.state()[0].second.item<int64_t>(), reference.attr("count").toTensor().item<int64_t>())
        << "call " << call;
  }
  // State handed in: the next call counts from it.
  compiled.state()[0].second.fill_(10);
  reference.attr("count").toTensor().fill_(10);
  EXPECT_TRUE(at::allclose(compiled.run({x.to(device)}).at(0).cpu(), reference.forward({x}).toTensor(), 1e-5, 1e-5));
  EXPECT_EQ(compiled.state()[0].second.item<int64_t>(), 11);
  // The write lands in the buffer itself, and a second model from the file keeps its own count.
  EXPECT_FALSE(has_node(compiled.graph(), "aten::copy_"));
  EXPECT_EQ(compile(testing::fixture_path(file), {x.to(device)}, on(device)).state()[0].second.item<int64_t>(), 0);
}

void expect_cache_written_as_eager(const std::string& file, c10::Device device) {
  SCOPED_TRACE(file);
  torch::jit::Module reference = torch::jit::load(testing::fixture_path("cache_update.pt"));
  const at::Tensor x = at::randn({1, 4});
  const at::Tensor first_cache = at::randn({5, 4});
  const at::Tensor cache = first_cache.to(device, /*non_blocking=*/false, /*copy=*/true);
  const at::Tensor expected_cache = first_cache.clone();
  const CompiledModel compiled =
      compile(testing::fixture_path(file), {x.to(device), cache, at::tensor({0L}).to(device)}, on(device));
  EXPECT_TRUE(at::equal(cache.cpu(), first_cache)) << "compiling wrote the caller's cache";
  for (int64_t call = 0; call < 3; ++call) {
    const at::Tensor position = at::tensor({call});
    const at::Tensor row = x * static_cast<double>(call + 1);
    const at::Tensor expected = reference.forward({row, expected_cache, position}).toTensor();
    const at::Tensor output = compiled.run({row.to(device), cache, position.to(device)}).at(0).cpu();
    EXPECT_TRUE(at::allclose(output, expected)) << "call " << call;
    EXPECT_TRUE(at::equal(cache.cpu(), expected_cache)) << "the cache after call " << call;
  }
  // index_copy_ writes the cache where it is: no whole copy of it per call.
  EXPECT_TRUE(has_node(compiled.graph(), "aten::index_copy_"));
  EXPECT_FALSE(has_node(compiled.graph(), "aten::copy_"));
  // Two reads (relu before the write, abs after) on streams of their own are ordered around it.
  EXPECT_THAT(validate(compiled.graph(), compiled.plan()), ::testing::IsEmpty());
}

// Two buffers (a K and a V cache), written one after the other at the position each call gives:
// both are state the compiled model keeps, in the module's order and names, each equal to the
// scripted module's after every call.
void expect_two_caches_written_as_eager(const std::string& file, c10::Device device) {
  SCOPED_TRACE(file);
  torch::jit::Module reference = torch::jit::load(testing::fixture_path("kv_caches.pt"));
  const at::Tensor x = at::randn({1, 1, 4});
  const CompiledModel compiled =
      compile(testing::fixture_path(file), {x.to(device), at::tensor({0L}).to(device)}, on(device));
  ASSERT_EQ(compiled.state().size(), 2u);
  EXPECT_EQ(compiled.state()[0].first, "k");
  EXPECT_EQ(compiled.state()[1].first, "v");
  for (const auto& [name, buffer] : compiled.state()) {
    EXPECT_EQ(buffer.count_nonzero().item<int64_t>(), 0) << "compiling wrote " << name;
  }
  for (int64_t call = 0; call < 4; ++call) {
    const at::Tensor row = at::randn({1, 1, 4});
    const at::Tensor position = at::tensor({(call * 3) % 8});
    const at::Tensor expected = reference.forward({row, position}).toTensor();
    const at::Tensor output = compiled.run({row.to(device), position.to(device)}).at(0).cpu();
    EXPECT_TRUE(at::allclose(output, expected)) << "call " << call;
    for (const auto& [name, buffer] : compiled.state()) {
      EXPECT_TRUE(at::equal(buffer.cpu(), reference.attr(name).toTensor())) << name << " after call " << call;
    }
  }
  EXPECT_THAT(validate(compiled.graph(), compiled.plan()), ::testing::IsEmpty());
}

const std::vector<std::string> kForms = {"", "_functional"};

TEST(ModelState, TwoCacheBuffersAreWrittenAsEagerOnTheCpu) {
  for (const std::string& form : kForms) expect_two_caches_written_as_eager("kv_caches" + form + ".pt2", c10::kCPU);
}

TEST(ModelState, OnTheGpuTwoCacheBuffersAreWrittenAsEager) {
  OPARA_REQUIRE_GPU();
  for (const std::string& form : kForms) {
    expect_two_caches_written_as_eager("kv_caches" + form + ".pt2", c10::Device(c10::kCUDA, 0));
  }
}

TEST(ModelState, ACounterBufferCountsAsEagerOnTheCpu) {
  for (const std::string& form : kForms) expect_counter_counts_as_eager("counter" + form + ".pt2", c10::kCPU);
}

TEST(ModelState, ACacheInputIsWrittenAsEagerOnTheCpu) {
  for (const std::string& form : kForms) expect_cache_written_as_eager("cache_update" + form + ".pt2", c10::kCPU);
}

TEST(ModelState, OnTheGpuACounterBufferCountsAsEager) {
  OPARA_REQUIRE_GPU();
  for (const std::string& form : kForms) {
    expect_counter_counts_as_eager("counter" + form + ".pt2", c10::Device(c10::kCUDA, 0));
  }
}

TEST(ModelState, OnTheGpuACacheInputIsWrittenAsEager) {
  OPARA_REQUIRE_GPU();
  for (const std::string& form : kForms) {
    expect_cache_written_as_eager("cache_update" + form + ".pt2", c10::Device(c10::kCUDA, 0));
  }
}

TEST(ModelState, NoGradAndDisabledAutocastRegionsAreInlined) {
  const Graph graph = load(testing::fixture_path("wrapped.pt2"));
  EXPECT_FALSE(std::any_of(graph.nodes().begin(), graph.nodes().end(),
                           [](const Node& node) { return node.kind.find("wrap_with") != std::string::npos; }));
  const at::Tensor x = at::randn({4});
  const CompiledModel compiled = compile(graph, {x}, on(c10::kCPU));
  const at::Tensor expected = at::cos(x) + at::sin(x) * 2 + (x + 1) + x;
  EXPECT_TRUE(at::allclose(compiled.run({x}).at(0), expected));
}

TEST(ModelState, AnEnabledAutocastRegionIsRefusedSayingWhatToDo) {
  try {
    load(testing::fixture_path("autocast_on.pt2"));
    ADD_FAILURE() << "an enabled autocast region was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("autocast_on.pt2"));
    EXPECT_THAT(error.what(), HasSubstr("torch.autocast region (enabled=True)"));
    EXPECT_THAT(error.what(), HasSubstr("run_decompositions"));
  }
}

}  // namespace
}  // namespace opara
