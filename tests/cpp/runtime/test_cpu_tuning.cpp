// The CPU tuner: which schedules it tries, that it keeps the one it timed fastest, and that what
// it hands back is a ready executor whose outputs equal eager's at its thread count, bit for bit.
// Which candidate wins depends on the machine; the test checks the choice against the tuner's own
// timings, never against a speed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "model_files.h"
#include "opara/cpu_tuning.h"
#include "opara/eager_executor.h"
#include "opara/graph_analysis.h"
#include "opara/load.h"
#include "opara/outputs.h"

namespace opara {
namespace {

using ::testing::IsEmpty;

using Shapes = std::vector<std::pair<int, int>>;  // (max_streams, intra_op_threads)

Shapes shapes_of(const std::vector<CpuShape>& shapes) {
  Shapes pairs;
  for (const CpuShape& shape : shapes) pairs.emplace_back(shape.max_streams, shape.intra_op_threads);
  return pairs;
}

std::vector<at::Tensor> eager_outputs(const Graph& graph, const std::vector<c10::IValue>& inputs, int threads) {
  const int previous = at::get_num_threads();
  at::set_num_threads(threads);
  EagerExecutor eager(graph);
  auto outputs = flatten_tensors(eager.run(inputs));
  at::set_num_threads(previous);
  return outputs;
}

CpuTuningOptions quick_tuning() {
  CpuTuningOptions tuning;
  tuning.warmup_runs = 1;
  tuning.rounds = 2;
  tuning.runs = 2;
  return tuning;
}

TEST(CpuTuning, CandidatesAreOneStreamOnAllCoresThenCapsOfOneThreadEach) {
  EXPECT_EQ(shapes_of(cpu_shape_candidates(1, 1)), (Shapes{{1, 1}}));
  EXPECT_EQ(shapes_of(cpu_shape_candidates(2, 2)), (Shapes{{1, 2}, {0, 1}, {2, 1}}));
  EXPECT_EQ(shapes_of(cpu_shape_candidates(2, 0)), (Shapes{{1, 1}, {0, 1}, {2, 1}}));
  EXPECT_EQ(shapes_of(cpu_shape_candidates(6, 6)), (Shapes{{1, 6}, {0, 1}, {2, 1}, {4, 1}, {6, 1}}));
  EXPECT_EQ(shapes_of(cpu_shape_candidates(16, 8)), (Shapes{{1, 8}, {0, 1}, {2, 1}, {4, 1}, {8, 1}, {16, 1}}));
}

class CpuTuningModels : public ::testing::TestWithParam<const char*> {};

TEST_P(CpuTuningModels, KeepsTheFastestItTimedAndItsOutputsAreEagersBitwise) {
  OPARA_REQUIRE_MODEL(GetParam());
  const Graph graph = load(testing::model_path(GetParam(), "pt"));
  const testing::FormatReference reference = testing::format_reference(GetParam(), "pt");
  const PlanOptions plan_options;  // Opara's streams and order
  const int uncapped = make_plan(graph, plan_options).stream_count;

  const CpuTuning tuned = tune_cpu_executor(graph, plan_options, {}, reference.inputs, {}, quick_tuning());

  // Every candidate but the caps that would plan the uncapped plan again, in order.
  std::vector<CpuShape> expected;
  for (const CpuShape& shape : cpu_shape_candidates(usable_cores(), usable_cores())) {
    if (shape.max_streams <= 1 || shape.max_streams < uncapped) expected.push_back(shape);
  }
  std::vector<CpuShape> tried;
  for (const CpuTuningCandidate& candidate : tuned.candidates) {
    tried.push_back(candidate.shape);
    const int streams = candidate.shape.max_streams == 0 ? uncapped : std::min(candidate.shape.max_streams, uncapped);
    EXPECT_EQ(candidate.streams, streams) << "cap " << candidate.shape.max_streams;
    EXPECT_GT(candidate.median_ms, 0);
    EXPECT_LE(candidate.speedup, tuned.candidates[tuned.chosen].speedup) << "a faster candidate was not kept";
  }
  EXPECT_EQ(shapes_of(tried), shapes_of(expected));
  EXPECT_DOUBLE_EQ(tuned.candidates.front().speedup, 1.0);
  EXPECT_EQ(tuned.runs_per_round, expected.size() > 1 ? 2 : 0);  // no budget: every run asked for
  EXPECT_GT(tuned.tuning_ms, 0);

  ASSERT_NE(tuned.executor, nullptr);
  const CpuTuningCandidate& chosen = tuned.candidates[tuned.chosen];
  EXPECT_EQ(tuned.executor->plan().stream_count, chosen.streams);
  EXPECT_EQ(tuned.executor->intra_op_threads(), chosen.shape.intra_op_threads);
  EXPECT_THAT(validate(graph, tuned.executor->plan()), IsEmpty());
  EXPECT_TRUE(bitwise_equal(flatten_tensors(tuned.executor->run(reference.inputs)),
                            eager_outputs(graph, reference.inputs, chosen.shape.intra_op_threads)));
}

// branchy opens 14 streams; chain's single path opens one, so no cap is worth trying.
INSTANTIATE_TEST_SUITE_P(Models, CpuTuningModels, ::testing::Values("branchy", "chain"));

TEST(CpuTuning, TheSingleStreamPolicyHasOneCandidateAndIsNotTimed) {
  OPARA_REQUIRE_MODEL("branchy");
  const Graph graph = load(testing::model_path("branchy", "pt"));
  const testing::FormatReference reference = testing::format_reference("branchy", "pt");
  CpuExecutorOptions executor_options;
  executor_options.intra_op_threads = 1;
  const CpuTuning tuned = tune_cpu_executor(graph, {StreamPolicy::kSingle, OrderPolicy::kTopological, 0}, {},
                                            reference.inputs, executor_options, quick_tuning());
  ASSERT_EQ(tuned.candidates.size(), 1u);
  EXPECT_EQ(shapes_of({tuned.candidates.front().shape}), (Shapes{{1, 1}}));
  EXPECT_EQ(tuned.runs_per_round, 0);
  EXPECT_EQ(tuned.executor->plan().stream_count, 1);
  EXPECT_EQ(tuned.executor->intra_op_threads(), 1);
}

TEST(CpuTuning, ABudgetCutsTheRunsPerRoundButNeverToNone) {
  OPARA_REQUIRE_MODEL("branchy");
  if (usable_cores() < 2) GTEST_SKIP() << "one usable CPU: there is a single candidate and nothing to time";
  const Graph graph = load(testing::model_path("branchy", "pt"));
  const testing::FormatReference reference = testing::format_reference("branchy", "pt");
  CpuTuningOptions tuning = quick_tuning();
  tuning.budget_ms = 0.001;
  EXPECT_EQ(tune_cpu_executor(graph, {}, {}, reference.inputs, {}, tuning).runs_per_round, 1);
  tuning.budget_ms = 1e9;
  EXPECT_EQ(tune_cpu_executor(graph, {}, {}, reference.inputs, {}, tuning).runs_per_round, tuning.runs);
}

}  // namespace
}  // namespace opara
