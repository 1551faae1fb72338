// The pool estimate on every test model, from the shapes one CPU run records: keep-alive holds
// every result, record-stream frees what one stream alone read, and the budget's cap fits.
#include <gtest/gtest.h>

#include <algorithm>

#include "exec/record_shapes.h"
#include "exec/state_buffers.h"
#include "model_files.h"
#include "opara/load.h"
#include "opara/plan.h"
#include "schedule/caching_allocator_model.h"
#include "schedule/pool_estimate.h"

namespace opara {
namespace {

class ModelPoolEstimate : public ::testing::TestWithParam<std::string> {};

// The bytes of every result capture allocates, each rounded as the allocator rounds it.
std::size_t fresh_result_bytes(const Graph& graph, const std::vector<NodeShapes>& shapes) {
  std::size_t bytes = 0;
  for (const Node& node : graph.nodes()) {
    if (!node.has(kLaunchesKernel) || node.has(kView) || node.has(kWritesInput) || node.outputs.empty()) continue;
    for (const TensorShape& result : shapes[node.id].outputs) {
      if (result.bytes() > 0) bytes += CachingAllocatorModel::rounded(static_cast<std::size_t>(result.bytes()));
    }
  }
  return bytes;
}

TEST_P(ModelPoolEstimate, KeepAliveHoldsEveryResultAndTheBudgetsCapFits) {
  OPARA_REQUIRE_MODEL(GetParam());
  for (const char* extension : {"pt", "pt2"}) {
    const Graph graph = load(testing::model_path(GetParam(), extension));
    std::vector<c10::IValue> inputs = testing::format_reference(GetParam(), extension).inputs;
    for (const at::Tensor& state : initial_state(graph, c10::kCPU)) inputs.emplace_back(state);
    const std::vector<NodeShapes> shapes = record_shapes(graph, inputs);
    const std::size_t results = fresh_result_bytes(graph, shapes);
    ASSERT_GT(results, 0U) << extension;
    const Plan single = make_plan(graph, PlanOptions{StreamPolicy::kSingle});
    const Plan opara = make_plan(graph, PlanOptions{});
    for (const Plan* plan : {&single, &opara}) {
      const PoolEstimate kept = estimate_pool(graph, *plan, shapes, CaptureHold::kKeepAlive);
      EXPECT_EQ(kept.held_bytes, results) << extension;
      // A block is taken whole when what it would leave is too small to split off.
      EXPECT_GE(kept.peak_live_bytes, results) << extension;
      EXPECT_GE(kept.pool_bytes, results) << extension;
      const PoolEstimate freed = estimate_pool(graph, *plan, shapes, CaptureHold::kRecordStream);
      EXPECT_LE(freed.held_bytes, kept.held_bytes) << extension;
      EXPECT_LE(freed.peak_live_bytes, kept.peak_live_bytes) << extension;
      EXPECT_GE(freed.pool_bytes, freed.peak_live_bytes) << extension;
      EXPECT_EQ(freed.pool_bytes % kAllocatorMinBlock, 0U) << extension;
    }
    // The default budget, 1.3 times the sequential graph's estimate: the cap it gives fits it.
    const std::size_t budget = estimate_pool(graph, single, shapes).pool_bytes * 13 / 10;
    const int cap = stream_cap_within(graph, PlanOptions{}, {}, shapes, budget);
    PlanOptions capped;
    capped.max_streams = cap;
    const Plan fitted = make_plan(graph, capped);
    if (cap != 1) {
      EXPECT_LE(estimate_pool(graph, fitted, shapes).pool_bytes, budget) << extension << " cap " << cap;
    }
    EXPECT_LE(fitted.stream_count, opara.stream_count) << extension;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ModelPoolEstimate, ::testing::ValuesIn(testing::all_models()));

}  // namespace
}  // namespace opara
