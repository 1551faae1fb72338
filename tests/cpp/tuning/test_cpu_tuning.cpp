// The CPU tuner: which schedules it tries, that it keeps the one it timed fastest, and that what
// it hands back is a ready executor whose outputs equal eager's at its thread count, bit for bit.
// Which candidate wins depends on the machine; the test checks the choice against the tuner's own
// timings, never against a speed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/jit/api/module.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "exec/eager_executor.h"
#include "exec/outputs.h"
#include "graph/graph_analysis.h"
#include "model_files.h"
#include "opara/load.h"
#include "tuning/cpu_tuning.h"
#include "tuning/measured_choice.h"

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

TEST(CpuTuning, CandidatesAreEagersScheduleThenStreamsOfOneThreadEach) {
  EXPECT_EQ(shapes_of(cpu_shape_candidates(1, 1, 14)), (Shapes{{1, 1}}));
  EXPECT_EQ(shapes_of(cpu_shape_candidates(2, 2, 14)), (Shapes{{1, 2}, {0, 1}, {2, 1}}));
  EXPECT_EQ(shapes_of(cpu_shape_candidates(2, 0, 14)), (Shapes{{1, 1}, {0, 1}, {2, 1}}));
  EXPECT_EQ(shapes_of(cpu_shape_candidates(6, 6, 14)), (Shapes{{1, 6}, {0, 1}, {2, 1}, {4, 1}, {6, 1}}));
  EXPECT_EQ(shapes_of(cpu_shape_candidates(16, 8, 28)), (Shapes{{1, 8}, {0, 1}, {2, 1}, {4, 1}, {8, 1}, {16, 1}}));
  // Caps at or past the stream count are the uncapped plan; cores to spare go to intra-op threads.
  EXPECT_EQ(shapes_of(cpu_shape_candidates(2, 2, 2)), (Shapes{{1, 2}, {0, 1}}));
  EXPECT_EQ(shapes_of(cpu_shape_candidates(16, 8, 4)), (Shapes{{1, 8}, {0, 1}, {2, 1}, {0, 4}}));
  EXPECT_EQ(shapes_of(cpu_shape_candidates(16, 16, 5)), (Shapes{{1, 16}, {0, 1}, {2, 1}, {4, 1}, {0, 3}}));
  // One stream: nothing but eager's schedule.
  EXPECT_EQ(shapes_of(cpu_shape_candidates(16, 8, 1)), (Shapes{{1, 8}}));
}

// The candidates the tuner should time for `graph`, in order, but those that plan what an earlier
// one with the same threads did; with their plans.
std::pair<std::vector<CpuShape>, std::vector<Plan>> expected_candidates(const Graph& graph, int threads) {
  const PlanOptions plan_options;  // Opara's streams and order
  auto plan_capped_at = [&](int cap) { return make_plan(graph, {plan_options.streams, plan_options.order, cap}); };
  std::vector<CpuShape> expected;
  std::vector<Plan> expected_plans;
  for (const CpuShape& shape : cpu_shape_candidates(usable_cores(), threads, plan_capped_at(0).stream_count)) {
    Plan plan = plan_capped_at(shape.max_streams);
    bool again = false;
    for (std::size_t k = 0; k < expected.size(); ++k) {
      again = again ||
              (expected[k].intra_op_threads == shape.intra_op_threads && expected_plans[k].stream_of == plan.stream_of);
    }
    if (again) continue;
    expected.push_back(shape);
    expected_plans.push_back(std::move(plan));
  }
  return {std::move(expected), std::move(expected_plans)};
}

// Another schedule than eager's only when it was clearly faster both ways, and the fastest such.
void expect_kept_the_clearly_fastest(const CpuTuning& tuned) {
  const CpuTuningCandidate& chosen = tuned.candidates[tuned.chosen];
  const CpuTuningOptions defaults;
  if (tuned.chosen != 0) {
    EXPECT_GE(chosen.speedup, defaults.min_speedup);
    EXPECT_LE(chosen.median_ms * defaults.min_speedup, tuned.candidates.front().median_ms);
  }
  for (const CpuTuningCandidate& candidate : tuned.candidates) {
    const bool clearly_faster = candidate.speedup >= defaults.min_speedup &&
                                candidate.median_ms * defaults.min_speedup <= tuned.candidates.front().median_ms;
    if (clearly_faster) {
      EXPECT_LE(candidate.speedup, chosen.speedup) << "a faster candidate was not kept";
    }
  }
  // Undecided timings (one measure alone says clearly faster) are timed again before choosing.
  std::vector<MeasuredCandidate> measured;
  for (const CpuTuningCandidate& candidate : tuned.candidates)
    measured.push_back({candidate.median_ms, candidate.speedup});
  if (!tuned.timed_again) {
    EXPECT_FALSE(measures_disagree(measured, defaults.min_speedup)) << "chosen undecided";
  }
}

class CpuTuningModels : public ::testing::TestWithParam<const char*> {};

TEST_P(CpuTuningModels, KeepsWhatItTimedFastestAndItsOutputsAreEagersBitwise) {
  OPARA_REQUIRE_MODEL(GetParam());
  const Graph graph = load(testing::model_path(GetParam(), "pt"));
  const testing::FormatReference reference = testing::format_reference(GetParam(), "pt");
  const int threads = std::min(at::get_num_threads(), usable_cores());

  const CpuTuning tuned = tune_cpu_executor(graph, PlanOptions{}, {}, reference.inputs, {}, quick_tuning());

  const auto [expected, expected_plans] = expected_candidates(graph, threads);
  std::vector<CpuShape> tried;
  for (std::size_t k = 0; k < tuned.candidates.size(); ++k) {
    const CpuTuningCandidate& candidate = tuned.candidates[k];
    EXPECT_GT(candidate.median_ms, 0);
    if (candidate.searched_priorities) {
      // The candidate before it again, with priorities the replay ran faster.
      ASSERT_GT(k, 0u);
      const CpuTuningCandidate& given = tuned.candidates[k - 1];
      EXPECT_FALSE(given.searched_priorities);
      EXPECT_EQ(shapes_of({candidate.shape}), shapes_of({given.shape}));
      EXPECT_EQ(candidate.streams, given.streams);
      EXPECT_GE(candidate.replay_speedup, CpuTuningOptions{}.min_replay_gain);
      continue;
    }
    EXPECT_DOUBLE_EQ(candidate.replay_speedup, 1.0);
    if (tried.size() < expected_plans.size()) {
      EXPECT_EQ(candidate.streams, expected_plans[tried.size()].stream_count);
    }
    tried.push_back(candidate.shape);
  }
  EXPECT_EQ(shapes_of(tried), shapes_of(expected));
  EXPECT_EQ(shapes_of({tuned.candidates.front().shape}), (Shapes{{1, threads}}));
  EXPECT_DOUBLE_EQ(tuned.candidates.front().speedup, 1.0);
  EXPECT_EQ(tuned.runs_per_round, tuned.candidates.size() > 1 ? 2 : 0);  // no budget: every run asked for
  EXPECT_GT(tuned.tuning_ms, 0);
  expect_kept_the_clearly_fastest(tuned);

  const CpuTuningCandidate& chosen = tuned.candidates[tuned.chosen];
  ASSERT_NE(tuned.executor, nullptr);
  EXPECT_EQ(tuned.executor->plan().stream_count, chosen.streams);
  EXPECT_EQ(tuned.executor->intra_op_threads(), chosen.shape.intra_op_threads);
  EXPECT_THAT(validate(graph, tuned.executor->plan()), IsEmpty());
  EXPECT_TRUE(bitwise_equal(flatten_tensors(tuned.executor->run(reference.inputs)),
                            eager_outputs(graph, reference.inputs, chosen.shape.intra_op_threads)));
}

// branchy opens 14 streams; chain's single path opens one: eager's schedule alone, untimed.
INSTANTIATE_TEST_SUITE_P(Models, CpuTuningModels, ::testing::Values("branchy", "chain"));

TEST(CpuTuning, NoIterationsNoSearchedCandidates) {
  OPARA_REQUIRE_MODEL("branchy");
  const Graph graph = load(testing::model_path("branchy", "pt"));
  const testing::FormatReference reference = testing::format_reference("branchy", "pt");
  CpuTuningOptions tuning = quick_tuning();
  tuning.search_iterations = 0;
  const CpuTuning tuned = tune_cpu_executor(graph, {}, {}, reference.inputs, {}, tuning);
  for (const CpuTuningCandidate& candidate : tuned.candidates) EXPECT_FALSE(candidate.searched_priorities);
}

TEST(CpuTuning, TheSingleStreamPolicyHasOneCandidateAndIsNotTimed) {
  OPARA_REQUIRE_MODEL("branchy");
  const Graph graph = load(testing::model_path("branchy", "pt"));
  const testing::FormatReference reference = testing::format_reference("branchy", "pt");
  CpuExecutorOptions executor_options;
  executor_options.cpu.intra_op_threads = 1;
  const CpuTuning tuned = tune_cpu_executor(graph, {StreamPolicy::kSingle, OrderPolicy::kTopological, 0}, {},
                                            reference.inputs, executor_options, quick_tuning());
  ASSERT_EQ(tuned.candidates.size(), 1u);
  EXPECT_EQ(shapes_of({tuned.candidates.front().shape}), (Shapes{{1, 1}}));
  EXPECT_EQ(tuned.runs_per_round, 0);
  EXPECT_EQ(tuned.executor->plan().stream_count, 1);
  EXPECT_EQ(tuned.executor->intra_op_threads(), 1);
}

TEST(CpuTuning, ABudgetCutsRunsThenRoundsButNeverToNone) {
  OPARA_REQUIRE_MODEL("branchy");
  if (usable_cores() < 2) GTEST_SKIP() << "one usable CPU: there is a single candidate and nothing to time";
  const Graph graph = load(testing::model_path("branchy", "pt"));
  const testing::FormatReference reference = testing::format_reference("branchy", "pt");
  CpuTuningOptions tuning = quick_tuning();
  tuning.budget_ms = 0.001;
  tuning.rounds = 10;
  const CpuTuning cut = tune_cpu_executor(graph, {}, {}, reference.inputs, {}, tuning);
  EXPECT_EQ(cut.runs_per_round, 1);
  EXPECT_EQ(cut.rounds, cut.timed_again ? 6 : 3) << "rounds are cut too, to three (timed again: twice)";
  tuning.budget_ms = 1e9;
  const CpuTuning uncut = tune_cpu_executor(graph, {}, {}, reference.inputs, {}, tuning);
  EXPECT_EQ(uncut.runs_per_round, tuning.runs);
  EXPECT_EQ(uncut.rounds, uncut.timed_again ? 20 : 10);
  tuning.rounds = 0;  // nonsense counts time one run of one round, rather than nothing or forever
  tuning.runs = -3;
  const CpuTuning once = tune_cpu_executor(graph, {}, {}, reference.inputs, {}, tuning);
  EXPECT_EQ(once.runs_per_round, 1);
  EXPECT_EQ(once.rounds, once.timed_again ? 2 : 1);
  for (const CpuTuningCandidate& candidate : once.candidates) EXPECT_GT(candidate.median_ms, 0);
}

// A model that halves its input in place: tuning runs it dozens of times and must leave the input
// as it was given, not at 2^-dozens (where denormals would time differently, too).
TEST(CpuTuning, InputsTheModelWritesAreAsGivenAfterTuning) {
  const std::string path = testing::scratch_path("halves_its_input.pt");
  torch::jit::Module module("HalvesItsInput");
  module.define(R"(
def forward(self, x):
    x.mul_(0.5)
    return torch.relu(x) + torch.sigmoid(x)
)");
  module.save(path);
  const Graph graph = load(path);
  ASSERT_EQ(inputs_written_in_place(graph), std::vector<bool>{true});
  const at::Tensor x = at::linspace(1, 2, 64);
  const at::Tensor given = x.clone();
  const CpuTuning tuned = tune_cpu_executor(graph, {}, {}, {x}, {}, quick_tuning());
  EXPECT_TRUE(at::equal(x, given)) << "max |x - given| " << (x - given).abs().max().item<double>();
  // The executor it hands back still writes, once a run, as eager does.
  tuned.executor->run({x});
  EXPECT_TRUE(at::equal(x, given * 0.5));
}

}  // namespace
}  // namespace opara
