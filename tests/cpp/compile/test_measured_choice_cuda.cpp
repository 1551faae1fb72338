// compile()'s measured choice on CUDA (CudaOptions::measure_ms, memory_budget): the plan's streams
// capped until its pool estimate fits the budget, then the sequential graph, a capped plan and the
// plan are captured and timed, the kept one is the fastest unless not clearly faster than one
// stream, a candidate over the memory budget is dropped, and the timed replays leave the model's
// state as it was; the estimate is compared with the pools measured. The rule itself is tested on the CPU
// (tests/cpp/tuning/test_measured_choice.cpp); these are its GPU twins, skipped without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <ATen/cuda/CUDAGraph.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "exec/eager_executor.h"
#include "exec/outputs.h"
#include "exec/state_buffers.h"
#include "model_files.h"
#include "opara/compiled_model.h"
#include "opara/load.h"
#include "opara/model_profiler.h"
#include "random_models.h"
#include "tuning/measured_choice.h"

namespace opara {
namespace {

const c10::Device kGpu(c10::kCUDA, 0);

std::vector<at::Tensor> eager_on_gpu(const Graph& graph, const std::vector<at::Tensor>& inputs) {
  EagerExecutor eager(graph, kGpu);
  return flatten_tensors(eager.run(std::vector<c10::IValue>(inputs.begin(), inputs.end())));
}

void expect_close(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t k = 0; k < actual.size(); ++k) {
    EXPECT_TRUE(at::allclose(actual[k].cpu(), expected[k].cpu(), 1e-4, 1e-4)) << "output " << k;
  }
}

// A budget every candidate fits: eight branches of small tensors take a 2 MiB segment each, which
// the default 1.3 times the sequential graph's pool would cap to one stream before measuring.
Options generous_budget() {
  Options options;
  options.cuda.memory_budget.ratio = 100;
  return options;
}

TEST(MeasuredChoiceCuda, TheKeptCandidateIsTheSequentialGraphOrClearlyFasterAndWithinBudget) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU here: the GPU path is not run";
  const Graph graph = testing::wide_graph(8);
  const std::vector<at::Tensor> inputs{at::randn({512, 512}, at::kCUDA)};
  const CompiledModel compiled = compile(graph, inputs, generous_budget());
  const CompiledStats stats = compiled.stats();
  ASSERT_EQ(stats.candidates.size(), 3u) << "one stream, capped at 4, the plan";
  EXPECT_EQ(stats.candidates[0].max_streams, 1);
  EXPECT_EQ(stats.candidates[0].streams, 1);
  EXPECT_EQ(stats.candidates[1].max_streams, 4);
  EXPECT_EQ(stats.candidates[2].max_streams, 0);
  EXPECT_EQ(stats.candidates[2].streams, 8);
  EXPECT_GT(stats.measure_ms, 0);
  EXPECT_EQ(stats.budget_stream_cap, 0) << "the plan's estimate fits: uncapped";
  EXPECT_EQ(stats.memory_budget_bytes,
            static_cast<std::size_t>(std::ceil(
                100 * static_cast<double>(stats.candidates[0].pool_bytes + stats.candidates[0].workspace_bytes))));
  for (const CudaCandidate& candidate : stats.candidates) {
    EXPECT_GT(candidate.pool_bytes, 0u);
    EXPECT_GT(candidate.pool_estimate_bytes, 0u);
    EXPECT_EQ(candidate.workspace_estimate_bytes, 0u) << "no matrix product";
    EXPECT_EQ(candidate.over_budget, over_budget(candidate, stats.memory_budget_bytes));
    if (!candidate.over_budget) {
      EXPECT_GT(candidate.median_ms, 0);
    }
  }
  const CudaCandidate& kept = stats.candidates.at(stats.candidate_chosen);
  EXPECT_FALSE(kept.over_budget);
  if (stats.candidate_chosen != 0) {
    EXPECT_GE(kept.speedup, kClearlyFaster);
    EXPECT_LE(kept.median_ms * kClearlyFaster, stats.candidates[0].median_ms);
  }
  EXPECT_EQ(stats.streams, kept.streams) << "the model runs the kept candidate's graphs";
  EXPECT_EQ(stats.pool_bytes, kept.pool_bytes);
  expect_close(compiled.run(inputs), eager_on_gpu(graph, inputs));
}

// A budget of two segments more than the sequential graph's pool: the estimate caps the plan first,
// and whatever is measured over the budget is followed by fewer streams until some fit or two are
// left (the first H200 run's GoogLeNet kept one stream where two fit).
TEST(MeasuredChoiceCuda, OverTheBudgetFewerStreamsAreCapturedUntilSomeFit) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU here: the GPU path is not run";
  const Graph graph = testing::wide_graph(8);
  const std::vector<at::Tensor> inputs{at::randn({512, 512}, at::kCUDA)};
  Options one_stream;
  one_stream.plan.streams = StreamPolicy::kSingle;
  const std::size_t sequential = compile(graph, inputs, one_stream).stats().pool_bytes;
  Options options;
  options.cuda.memory_budget.bytes = sequential + 2 * (std::size_t{2} << 20);
  const CompiledModel compiled = compile(graph, inputs, options);
  const CompiledStats stats = compiled.stats();
  ASSERT_GE(stats.candidates.size(), 2u);
  EXPECT_EQ(stats.candidates.front().max_streams, 1);
  int fewest_over = 0;
  bool several_fit = false;
  for (const CudaCandidate& candidate : stats.candidates) {
    std::cout << "capped at " << candidate.max_streams << ": " << candidate.streams << " streams, pool "
              << candidate.pool_bytes << (candidate.over_budget ? " (over)" : "") << "\n";
    EXPECT_EQ(candidate.over_budget, over_budget(candidate, stats.memory_budget_bytes));
    if (candidate.streams < 2) continue;
    if (!candidate.over_budget) several_fit = true;
    if (candidate.over_budget && (fewest_over == 0 || candidate.streams < fewest_over)) fewest_over = candidate.streams;
  }
  EXPECT_TRUE(several_fit || fewest_over == 2) << "stopped before some streams fit or two were left";
  EXPECT_EQ(smaller_cap_within_budget(stats.candidates), 0) << "a cap left untried";
  EXPECT_FALSE(stats.candidates.at(stats.candidate_chosen).over_budget);
  EXPECT_EQ(stats.memory_budget_bytes, options.cuda.memory_budget.bytes);
  expect_close(compiled.run(inputs), eager_on_gpu(graph, inputs));
}

// Branches of matrix products: each stream that runs one holds a cuBLAS workspace (32 MiB on
// Hopper), which the budget counts with the pool. Under the default budget the kept graphs hold no
// more than it allows, and each candidate's workspaces are estimated before capture.
TEST(MeasuredChoiceCuda, TheBudgetCountsTheCublasWorkspacesOfEveryStreamThatRunsAProduct) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU here: the GPU path is not run";
  Graph graph;
  const ValueId x = graph.add_input("x");
  std::vector<ValueId> ends;
  for (int b = 0; b < 8; ++b) {
    const double scale = 1.0 + b;
    ends.push_back(
        graph
            .node(graph.add_node("aten::mm", {x}, {"Tensor"}, kLaunchesKernel,
                                 testing::unary([scale](const at::Tensor& t) { return at::mm(t, t * scale); })))
            .outputs[0]);
  }
  const NodeId sum = graph.add_node("aten::stack", ends, {"Tensor"}, kLaunchesKernel,
                                    testing::op([](const std::vector<c10::IValue>& in) {
                                      std::vector<at::Tensor> tensors;
                                      for (const c10::IValue& value : in) tensors.push_back(value.toTensor());
                                      return std::vector<c10::IValue>{at::stack(tensors)};
                                    }));
  graph.add_output(graph.node(sum).outputs[0]);
  const std::vector<at::Tensor> inputs{at::randn({256, 256}, at::kCUDA)};
  const CompiledModel compiled = compile(graph, inputs, Options{});
  const CompiledStats stats = compiled.stats();
  const std::size_t per_stream = at::cuda::getChosenWorkspaceSize();
  std::cout << "cuBLAS workspace a stream: " << per_stream << " bytes; budget " << stats.memory_budget_bytes
            << "; cap before capture " << stats.budget_stream_cap << "\n";
  for (const CudaCandidate& candidate : stats.candidates) {
    std::cout << "capped at " << candidate.max_streams << ": " << candidate.streams << " streams, pool "
              << candidate.pool_bytes << ", workspaces " << candidate.workspace_bytes << " (estimated "
              << candidate.workspace_estimate_bytes << ")" << (candidate.over_budget ? " (over)" : "") << "\n";
    EXPECT_EQ(candidate.over_budget, over_budget(candidate, stats.memory_budget_bytes));
    EXPECT_EQ(candidate.workspace_estimate_bytes % per_stream, 0u);
    EXPECT_GE(candidate.workspace_estimate_bytes, per_stream) << "every stream of it runs a product";
    EXPECT_GT(candidate.workspace_bytes, 0u);
  }
  if (!stats.candidates.empty()) {
    const CudaCandidate& kept = stats.candidates.at(stats.candidate_chosen);
    EXPECT_TRUE(stats.candidate_chosen == 0 || kept.pool_bytes + kept.workspace_bytes <= stats.memory_budget_bytes);
    EXPECT_EQ(stats.workspace_bytes, kept.workspace_bytes);
  }
  EXPECT_GE(stats.workspace_estimate_bytes, per_stream);
  expect_close(compiled.run(inputs), eager_on_gpu(graph, inputs));
}

TEST(MeasuredChoiceCuda, ABudgetOfOneByteCapsThePlanToOneStreamBeforeAnyCapture) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU here: the GPU path is not run";
  const Graph graph = testing::wide_graph(8);
  const std::vector<at::Tensor> inputs{at::randn({256, 256}, at::kCUDA)};
  Options options;
  options.cuda.memory_budget.bytes = 1;
  const CompiledModel compiled = compile(graph, inputs, options);
  const CompiledStats stats = compiled.stats();
  EXPECT_EQ(stats.budget_stream_cap, 1);
  EXPECT_TRUE(stats.candidates.empty()) << "one stream left: nothing to measure";
  EXPECT_EQ(stats.memory_budget_bytes, 1u);
  EXPECT_EQ(stats.streams, 1);
  EXPECT_GT(stats.pool_estimate_bytes, 0u);
  EXPECT_EQ(stats.pool_estimate_bytes, stats.sequential_pool_estimate_bytes);
  expect_close(compiled.run(inputs), eager_on_gpu(graph, inputs));
}

// bert_base's single cheap ops fork and join streams that cannot pay for their events: they are
// merged before the capture, as make_plan does with the same payoff and costs. On the GPU its host
// steps split it into graph segments, each planned on its own, and stats.streams is the most of
// any segment's: at most the whole graph's paid plan (the first GPU run: 16 against 17), and fewer
// than the plan that pays no heed.
TEST(MeasuredChoiceCuda, StreamsThatCannotPayForTheirEventsAreMergedBeforeCapture) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU here: the GPU path is not run";
  OPARA_REQUIRE_MODEL("bert_base");
  const Graph graph = load(testing::model_path("bert_base", "pt"));
  std::vector<at::Tensor> inputs;
  for (const at::Tensor& input : testing::format_reference("bert_base", "pt").tensors) inputs.push_back(input.to(kGpu));
  Options options = generous_budget();
  options.cuda.measure_ms = 0;
  const CompiledStats stats = compile(graph, inputs, options).stats();
  const ModelCosts costs = model_costs(graph, inputs, {}, kGpu);
  PlanOptions paid;
  paid.payoff = kShapeCostPayoff;
  EXPECT_LE(stats.streams, make_plan(graph, paid, costs.costs).stream_count);
  EXPECT_LT(stats.streams, make_plan(graph, PlanOptions{}, costs.costs).stream_count);
}

// The goals, on the models: under the default budget the pool is at most 1.3 times the
// sequential graph's, or 64 MiB more, and the estimate is within 20% of each pool measured.
TEST(MeasuredChoiceCuda, TheDefaultBudgetHoldsAndTheEstimateIsCloseToTheMeasuredPool) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU here: the GPU path is not run";
  int exported = 0;
  for (const char* name : {"branchy", "chain", "googlenet", "inception_v3"}) {
    if (!testing::model_exported(name)) continue;
    ++exported;
    const testing::FormatReference reference = testing::format_reference(name, "pt");
    const Graph graph = load(testing::model_path(name, "pt"));
    std::vector<at::Tensor> inputs;
    for (const at::Tensor& input : reference.tensors) inputs.push_back(input.to(kGpu));
    Options one_stream;
    one_stream.plan.streams = StreamPolicy::kSingle;
    const CompiledStats one = compile(graph, inputs, one_stream).stats();
    const CompiledStats chosen = compile(graph, inputs).stats();
    std::cout << name << ": sequential pool " << one.pool_bytes << " (estimate " << one.pool_estimate_bytes
              << "), default " << chosen.pool_bytes << " on " << chosen.streams << " streams (estimate "
              << chosen.pool_estimate_bytes << ", budget cap " << chosen.budget_stream_cap << ")\n";
    const double sequential = static_cast<double>(one.pool_bytes);
    EXPECT_LE(static_cast<double>(chosen.pool_bytes), std::max(1.3 * sequential, sequential + (64 << 20))) << name;
    for (const CompiledStats* stats : {&one, &chosen}) {
      const double measured = static_cast<double>(stats->pool_bytes);
      EXPECT_NEAR(static_cast<double>(stats->pool_estimate_bytes), measured, 0.2 * measured) << name;
    }
  }
  // Skipped, not passed, without the models: the GPU check runs what skipped again once they are exported.
  if (exported == 0) GTEST_SKIP() << "none of the models is exported: scripts/export_models.py";
}

TEST(MeasuredChoiceCuda, UnmeasuredOrCappedTheGraphIsThePlansAlone) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU here: the GPU path is not run";
  const Graph graph = testing::wide_graph(8);
  const std::vector<at::Tensor> inputs{at::randn({256, 256}, at::kCUDA)};
  Options unmeasured = generous_budget();
  unmeasured.cuda.measure_ms = 0;
  const CompiledStats plain = compile(graph, inputs, unmeasured).stats();
  EXPECT_TRUE(plain.candidates.empty());
  EXPECT_EQ(plain.measure_ms, 0);
  EXPECT_EQ(plain.streams, 8);
  Options capped;
  capped.plan.max_streams = 2;
  const CompiledStats two = compile(graph, inputs, capped).stats();
  EXPECT_TRUE(two.candidates.empty()) << "a cap the caller chose is not measured against others";
  EXPECT_EQ(two.streams, 2);
}

// A model that counts its calls in a buffer: dozens of timed replays while measuring, and the
// first call after compile still counts 1, as eager's does. Built as the exported-program importer
// builds state (a frozen TorchScript module keeps no buffer it writes): the counter a state buffer
// written in place, three products beside it, each worth a stream of its own.
Graph counts_its_calls() {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const ValueId count = graph.add_state("count", std::make_shared<InitialValueOp>(at::zeros({1})));
  const NodeId counted = graph.add_node("aten::add_", {count}, {"Tensor"}, kLaunchesKernel | kWritesInput,
                                        testing::unary([](const at::Tensor& t) { return t.add_(1); }));
  std::vector<ValueId> products;
  for (const auto& product : std::vector<std::function<at::Tensor(const at::Tensor&)>>{
           [](const at::Tensor& t) { return at::mm(t, t); }, [](const at::Tensor& t) { return at::mm(t.t(), t); },
           [](const at::Tensor& t) { return at::mm(t, t.t()); }}) {
    products.push_back(
        graph.node(graph.add_node("aten::mm", {x}, {"Tensor"}, kLaunchesKernel, testing::unary(product))).outputs[0]);
  }
  products.push_back(graph.node(counted).outputs[0]);
  const NodeId sum = graph.add_node(
      "test::sum", products, {"Tensor"}, kLaunchesKernel, testing::op([](const std::vector<c10::IValue>& in) {
        return std::vector<c10::IValue>{in[0].toTensor() + in[1].toTensor() + in[2].toTensor() * in[3].toTensor()};
      }));
  graph.add_output(graph.node(sum).outputs[0]);
  return graph;
}

TEST(MeasuredChoiceCuda, TimedReplaysLeaveTheStateAsFound) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU here: the GPU path is not run";
  const Graph graph = counts_its_calls();
  const at::Tensor x = at::randn({512, 512}, at::kCUDA);
  const CompiledModel compiled = compile(graph, {x}, generous_budget());
  const CompiledStats stats = compiled.stats();
  ASSERT_FALSE(stats.candidates.empty()) << "three branches: measured";
  // The products' streams hold cuBLAS workspaces of their own, outside the pool: more streams, more.
  EXPECT_GT(stats.candidates.front().workspace_bytes, 0u);
  EXPECT_GE(stats.candidates.back().workspace_bytes, stats.candidates.front().workspace_bytes);
  EXPECT_EQ(stats.workspace_bytes, stats.candidates.at(stats.candidate_chosen).workspace_bytes);
  EXPECT_EQ(compiled.state().at(0).second.item<float>(), 0) << "measuring advanced the counter";
  const at::Tensor expected = at::mm(x, x) + at::mm(x.t(), x) + at::mm(x, x.t());
  EXPECT_TRUE(at::allclose(compiled.run({x}).at(0), expected, 1e-4, 1e-3));
  EXPECT_EQ(compiled.state().at(0).second.item<float>(), 1);
}

// Buckets sharing one pool: the candidates are measured in pools of their own and the kept plan
// captured into the shared pool, whose models then take turns as before.
TEST(MeasuredChoiceCuda, InASharedPoolTheKeptPlanIsCapturedThere) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU here: the GPU path is not run";
  const Graph graph = testing::wide_graph(8);
  const std::vector<at::Tensor> inputs{at::randn({256, 256}, at::kCUDA)};
  Options options = generous_budget();
  options.cuda.memory_pool = at::cuda::graph_pool_handle();
  const CompiledModel first = compile(graph, inputs, options);
  const CompiledModel second = compile(graph, {inputs[0] * 2}, options);
  for (const CompiledModel* model : {&first, &second}) {
    const CompiledStats stats = model->stats();
    ASSERT_EQ(stats.candidates.size(), 3u);
    EXPECT_EQ(stats.streams, stats.candidates.at(stats.candidate_chosen).streams);
  }
  expect_close(first.run(inputs), eager_on_gpu(graph, inputs));
  expect_close(second.run({inputs[0] * 3}), eager_on_gpu(graph, {inputs[0] * 3}));
}

}  // namespace
}  // namespace opara
