// CompiledModel: compile a model file for example inputs and run it. On the CPU (host threads
// play the streams) it equals the model's own forward bit for bit; bad inputs are errors naming
// the input and what was expected; concurrent runs are serialized. On a GPU (skipped without
// one): every mode is allclose to eager, half-precision models too within their dtype's
// tolerance, 64 branches get 64 streams, an operation that cannot be captured becomes a host
// step, 1,000 replays with fresh inputs match eager, view outputs are the static buffers the next
// run overwrites, the stats describe the capture, and nodes sent to the CPU (named, whole LSTM
// cells, random ones, Comm+SD's on a fresh profile) give eager's outputs through their host steps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <future>
#include <random>
#include <set>

#include "exec/eager_executor.h"
#include "exec/outputs.h"
#include "exported_models.h"
#include "model_files.h"
#include "opara/compiled_model.h"
#include "opara/error.h"
#include "opara/load.h"
#include "opara/model_profiler.h"
#include "opara/profile.h"
#include "plan_fixtures.h"
#include "random_models.h"
#include "runtime/cpu/cpu_parallel_executor.h"
#include "support/percentile.h"
#include "tools/model_inputs.h"

namespace opara {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

Options cpu_options(int threads = at::get_num_threads()) {
  Options options;
  options.device = c10::kCPU;
  options.cpu.intra_op_threads = threads;
  return options;
}

struct Loaded {
  std::string path;
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> expected;
};

Loaded reference_of(const std::string& model, const std::string& extension) {
  testing::FormatReference reference = testing::format_reference(model, extension);
  return {testing::model_path(model, extension), std::move(reference.tensors), std::move(reference.expected)};
}

// ---- CPU ---------------------------------------------------------------------------------------

TEST(CompiledModelCpu, EveryPolicyGivesTheModelsOutputBitwise) {
  const testing::ExportedModels models = testing::exported_models({"branchy", "inplace", "googlenet"});
  if (models.exported.empty()) GTEST_SKIP() << models.missing_text();
  for (const std::string& model : models.exported) {
    for (const char* extension : {"pt", "pt2"}) {
      const Loaded loaded = reference_of(model, extension);
      for (StreamPolicy streams : testing::kStreamPolicies) {
        Options options = cpu_options();
        options.plan.streams = streams;
        const CompiledModel compiled = compile(loaded.path, loaded.inputs, options);
        EXPECT_THAT(validate(compiled.graph(), compiled.plan()), IsEmpty());
        EXPECT_TRUE(bitwise_equal(compiled.run(loaded.inputs), loaded.expected))
            << model << "." << extension << " " << to_string(streams);
      }
    }
  }
}

TEST(CompiledModelCpu, StatsDescribeThePlan) {
  OPARA_REQUIRE_MODEL("googlenet");
  const Loaded loaded = reference_of("googlenet", "pt");
  const CompiledModel compiled = compile(loaded.path, loaded.inputs, cpu_options());
  compiled.run(loaded.inputs);
  const CompiledStats stats = compiled.stats();
  EXPECT_EQ(stats.device, "cpu");
  EXPECT_EQ(stats.streams, compiled.plan().stream_count);
  EXPECT_EQ(stats.streams, 28);  // Opara's allocation on GoogLeNet, as in the paper
  EXPECT_EQ(stats.events, compiled.plan().wait_count());
  EXPECT_EQ(stats.segments, 1u);
  EXPECT_EQ(stats.host_nodes, 0u);
  EXPECT_EQ(stats.runs, 1u);
  EXPECT_GT(stats.compile_ms, 0);
  EXPECT_EQ(compiled.plan().cost_source, "shapes");
}

// run_traced (opara-bench trace): the run run() makes, outputs and all, with when each node ran on
// which of the plan's streams; the next traced run says its own, and a plain run is not traced.
TEST(CompiledModelCpu, ATracedRunSaysWhenEachNodeRanOnThePlansStreams) {
  OPARA_REQUIRE_MODEL("branchy");
  const Loaded loaded = reference_of("branchy", "pt");
  const CompiledModel compiled = compile(loaded.path, loaded.inputs, cpu_options());
  ASSERT_GT(compiled.plan().stream_count, 1);
  for (int traced_run = 0; traced_run < 2; ++traced_run) {
    std::vector<CompiledModel::NodeSpan> spans;
    EXPECT_TRUE(bitwise_equal(compiled.run_traced(loaded.inputs, spans), loaded.expected));
    std::set<NodeId> seen;
    std::set<int> streams;
    for (const CompiledModel::NodeSpan& span : spans) {
      EXPECT_TRUE(seen.insert(span.node).second) << "node " << span.node << " reported twice";
      EXPECT_EQ(span.stream, std::max(compiled.plan().stream_of.at(span.node), 0))
          << compiled.graph().describe(span.node);
      EXPECT_LE(span.start, span.end);
      streams.insert(span.stream);
    }
    for (NodeId id = 0; id < static_cast<NodeId>(compiled.graph().size()); ++id) {
      if (compiled.plan().stream_of[id] < 0) continue;
      EXPECT_TRUE(seen.count(id)) << compiled.graph().describe(id) << " not traced";
    }
    EXPECT_EQ(static_cast<int>(streams.size()), compiled.plan().stream_count);
  }
  EXPECT_TRUE(bitwise_equal(compiled.run(loaded.inputs), loaded.expected));  // untraced: nothing left to report to
  EXPECT_EQ(compiled.stats().runs, 3u);
}

// Left to itself (no cap, no thread count), compile() on the CPU times the candidate schedules
// and keeps one, which its stats name among the candidates (eager's schedule first); its outputs
// equal eager's at the kept thread count. cpu.tuning_ms = 0 keeps every stream the plan opens.
TEST(CompiledModelCpu, WithoutACapOrThreadCountTheScheduleIsTuned) {
  OPARA_REQUIRE_MODEL("branchy");
  if (usable_cores() < 2) GTEST_SKIP() << "one usable CPU: there is one schedule and nothing to tune";
  const Loaded loaded = reference_of("branchy", "pt");
  Options options;
  options.device = c10::kCPU;
  options.cpu.tuning_ms = 50;
  const CompiledModel tuned = compile(loaded.path, loaded.inputs, options);
  const CompiledStats stats = tuned.stats();
  EXPECT_GT(stats.tuning_ms, 0);
  const int workers = std::min(stats.streams, usable_cores());
  EXPECT_LE(stats.intra_op_threads * workers, usable_cores()) << "OpenMP teams outnumber the cores";
  EXPECT_EQ(stats.streams, tuned.plan().stream_count);
  ASSERT_GE(stats.tuning.size(), 2u);
  EXPECT_EQ(stats.tuning.front().streams, 1) << "eager's schedule comes first";
  EXPECT_TRUE(stats.tuning_timings == 1 || stats.tuning_timings == 2) << "several candidates are timed";
  ASSERT_LT(stats.tuning_chosen, stats.tuning.size());
  EXPECT_EQ(stats.tuning[stats.tuning_chosen].streams, stats.streams);
  EXPECT_EQ(stats.tuning[stats.tuning_chosen].shape.intra_op_threads, stats.intra_op_threads);
  EXPECT_THAT(validate(tuned.graph(), tuned.plan()), IsEmpty());
  const int previous = at::get_num_threads();
  at::set_num_threads(stats.intra_op_threads);
  EagerExecutor eager(tuned.graph());
  const std::vector<at::Tensor> expected =
      flatten_tensors(eager.run(std::vector<c10::IValue>(loaded.inputs.begin(), loaded.inputs.end())));
  at::set_num_threads(previous);
  EXPECT_TRUE(bitwise_equal(tuned.run(loaded.inputs), expected));

  // A warm start: the chosen schedule's options compile it again without tuning.
  std::map<std::string, std::string> again = chosen_schedule_options(stats);
  again["device"] = "cpu";
  const CompiledModel warm = compile(loaded.path, loaded.inputs, options_from_text(again));
  EXPECT_THAT(warm.stats().tuning, IsEmpty());
  EXPECT_EQ(warm.stats().tuning_ms, 0);
  EXPECT_EQ(warm.plan().stream_of, tuned.plan().stream_of);
  EXPECT_EQ(warm.stats().intra_op_threads, stats.intra_op_threads);

  options.cpu.tuning_ms = 0;
  const CompiledModel untuned = compile(loaded.path, loaded.inputs, options);
  EXPECT_EQ(untuned.stats().tuning_ms, 0);
  EXPECT_THAT(untuned.stats().tuning, IsEmpty());
  EXPECT_EQ(untuned.stats().streams, make_plan(untuned.graph(), {}).stream_count);
  EXPECT_EQ(untuned.stats().intra_op_threads, std::max(1, usable_cores() / untuned.stats().streams));
  // What region_plan compiles Inductor's kernels for on one stream (csrc/ext/plan_op.cpp).
  EXPECT_EQ(cpu_worker_threads(options, untuned.stats().streams), untuned.stats().intra_op_threads);
  options.cpu.intra_op_threads = 1;
  EXPECT_EQ(cpu_worker_threads(options, 1), 1);
  EXPECT_EQ(compile(loaded.path, loaded.inputs, options).stats().intra_op_threads, 1);
}

TEST(CompiledModelCpu, BadInputsAreNamedWithWhatWasExpected) {
  OPARA_REQUIRE_MODEL("branchy");
  const Loaded loaded = reference_of("branchy", "pt");
  const CompiledModel compiled = compile(loaded.path, loaded.inputs, cpu_options());
  const at::Tensor& x = loaded.inputs.at(0);
  auto error_of = [&](const std::vector<at::Tensor>& inputs) {
    try {
      compiled.run(inputs);
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error_of({}),
              AllOf(HasSubstr("branchy_b1.pt"), HasSubstr("compiled for 1 inputs"), HasSubstr("0 were given")));
  EXPECT_THAT(error_of({x, x}), HasSubstr("2 were given"));
  std::vector<std::int64_t> other_shape = x.sizes().vec();
  other_shape[0] += 1;
  EXPECT_THAT(error_of({at::zeros(other_shape)}),
              AllOf(HasSubstr("input 0"), HasSubstr("has shape"), HasSubstr("compile again")));
  EXPECT_THAT(error_of({x.to(at::kDouble)}), AllOf(HasSubstr("dtype Double"), HasSubstr("compiled for Float")));
  EXPECT_THAT(error_of({x.to(at::kMeta)}), AllOf(HasSubstr("is on meta"), HasSubstr("compiled for cpu")));
  EXPECT_THAT(error_of({at::Tensor()}), HasSubstr("undefined"));
  // Still usable after the errors.
  EXPECT_TRUE(bitwise_equal(compiled.run(loaded.inputs), loaded.expected));
}

TEST(CompiledModelCpu, BadPathsAndExamplesAreErrors) {
  EXPECT_THROW(compile("/nonexistent/model.pt", {at::zeros({1})}, cpu_options()), Error);
  OPARA_REQUIRE_MODEL("branchy");
  try {
    compile(testing::model_path("branchy", "pt"), {}, cpu_options());
    FAIL() << "compiled without example inputs";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("branchy_b1.pt"), HasSubstr("0 example inputs")));
  }
}

TEST(CompiledModelCpu, CudaWithoutAGpuSaysSo) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is present: the message for its absence cannot be shown";
  OPARA_REQUIRE_MODEL("branchy");
  const Loaded loaded = reference_of("branchy", "pt");
  Options options;
  options.device = c10::Device(c10::kCUDA, 0);
  try {
    compile(loaded.path, loaded.inputs, options);
    FAIL() << "compiled for CUDA without a GPU";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("needs a CUDA GPU"), HasSubstr("Options::device = cpu")));
  }
}

// On the CPU every node runs on the CPU already: an overflow policy changes nothing, but the nodes
// a manual placement names must exist.
TEST(CompiledModelCpu, OverflowOnTheCpuChangesNothingButNamesAreChecked) {
  OPARA_REQUIRE_MODEL("branchy");
  const Loaded loaded = reference_of("branchy", "pt");
  Options options = cpu_options();
  options.overflow.policy = OverflowPolicy::kManual;
  options.overflow.cpu_nodes = {"aten::relu"};
  const CompiledModel compiled = compile(loaded.path, loaded.inputs, options);
  EXPECT_TRUE(bitwise_equal(compiled.run(loaded.inputs), loaded.expected));
  EXPECT_EQ(compiled.stats().cpu_nodes, 0u);
  options.overflow.cpu_nodes = {"aten::rleu"};
  EXPECT_THAT([&] { compile(loaded.path, loaded.inputs, options); },
              ::testing::ThrowsMessage<Error>(HasSubstr("aten::rleu")));
  options.overflow.policy = OverflowPolicy::kCommSd;  // no profile needed where nothing moves
  EXPECT_TRUE(bitwise_equal(compile(loaded.path, loaded.inputs, options).run(loaded.inputs), loaded.expected));
}

TEST(CompiledModelCpu, ConcurrentRunsOnOneModelAreSerializedAndRight) {
  OPARA_REQUIRE_MODEL("branchy");
  const Loaded loaded = reference_of("branchy", "pt");
  const CompiledModel compiled = compile(loaded.path, loaded.inputs, cpu_options());
  std::vector<std::future<bool>> results;
  for (int thread = 0; thread < 4; ++thread) {
    results.push_back(std::async(std::launch::async, [&] {
      bool all = true;
      for (int i = 0; i < 5; ++i) all = all && bitwise_equal(compiled.run(loaded.inputs), loaded.expected);
      return all;
    }));
  }
  for (auto& result : results) EXPECT_TRUE(result.get());
  EXPECT_EQ(compiled.stats().runs, 20u);
}

// ---- GPU (skipped without one) ---------------------------------------------------------------------

// fp32 with TF32 off, as eager.
struct NoTf32 {
  NoTf32() : matmul(at::globalContext().allowTF32CuBLAS()), cudnn(at::globalContext().allowTF32CuDNN()) {
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
  }
  ~NoTf32() {
    at::globalContext().setAllowTF32CuBLAS(matmul);
    at::globalContext().setAllowTF32CuDNN(cudnn);
  }
  bool matmul;
  bool cudnn;
};

std::vector<at::Tensor> to_cuda(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> moved;
  for (const at::Tensor& tensor : tensors) moved.push_back(tensor.cuda());
  return moved;
}

std::vector<at::Tensor> eager_cuda(const Graph& graph, const std::vector<at::Tensor>& inputs) {
  EagerExecutor eager(graph, c10::Device(c10::kCUDA, 0));
  return flatten_tensors(eager.run(std::vector<c10::IValue>(inputs.begin(), inputs.end())));
}

struct Tolerance {
  double rtol = 1e-4;
  double atol = 1e-5;
};

// Compiled against eager on CUDA, by the outputs' dtype: kernels may differ between a stream of
// their own and a graph. About ten units in the last place of float16's 10-bit mantissa (2^-10)
// and six of bfloat16's 7-bit one (2^-7); fp32 (TF32 off) as everywhere else.
Tolerance tolerance_for(at::ScalarType dtype) {
  if (dtype == at::kHalf) return {1e-2, 1e-2};
  if (dtype == at::kBFloat16) return {5e-2, 5e-2};
  return {};
}

void expect_close(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected,
                  const std::string& label) {
  ASSERT_EQ(actual.size(), expected.size()) << label;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const at::ScalarType dtype = expected[i].scalar_type();
    const Tolerance tolerance = tolerance_for(dtype);
    // Half precision compared in float, so that the difference printed is the one allclose saw.
    const auto comparable = [dtype](const at::Tensor& t) {
      return at::isReducedFloatingType(dtype) ? t.cpu().to(at::kFloat) : t.cpu();
    };
    const at::Tensor got = comparable(actual[i]);
    const at::Tensor want = comparable(expected[i]);
    EXPECT_TRUE(at::allclose(got, want, tolerance.rtol, tolerance.atol))
        << label << ", output " << i << ": max |diff| " << (got - want).abs().max().item<double>();
  }
}

TEST(CompiledModelCuda, EveryModeOfEveryModelIsCloseToEager) {
  OPARA_REQUIRE_GPU();
  NoTf32 no_tf32;
  const testing::ExportedModels models = testing::exported_models(testing::all_models());
  if (models.exported.empty()) GTEST_SKIP() << models.missing_text();
  for (const std::string& model : models.exported) {
    for (const char* extension : {"pt", "pt2"}) {
      const Loaded loaded = reference_of(model, extension);
      const Graph graph = load(loaded.path);
      const auto inputs = to_cuda(loaded.inputs);
      const auto expected = eager_cuda(graph, inputs);
      for (StreamPolicy streams : {StreamPolicy::kSingle, StreamPolicy::kNimble, StreamPolicy::kOpara}) {
        for (MemoryProtection memory : {MemoryProtection::kRecordStream, MemoryProtection::kKeepAlive}) {
          Options options;
          options.plan.streams = streams;
          options.plan.order = streams == StreamPolicy::kOpara ? OrderPolicy::kOpara : OrderPolicy::kTopological;
          options.cuda.memory = memory;
          // Each policy's own plan: not the measured choice among caps, nor capped to the budget.
          options.cuda.measure_ms = 0;
          options.cuda.memory_budget.ratio = 1000;
          const CompiledModel compiled = compile(graph, inputs, options);
          const std::string label =
              fmt::format("{}.{} {} {}", model, extension, to_string(streams),
                          memory == MemoryProtection::kKeepAlive ? "keep-alive" : "record-stream");
          expect_close(compiled.run(inputs), expected, label);
          expect_close(compiled.run(inputs), expected, label + " (second run)");
        }
      }
    }
  }
}

TEST(CompiledModelCuda, SixtyFourBranchesUseSixtyFourStreamsAndAreRight) {
  OPARA_REQUIRE_GPU();
  const Graph graph = testing::wide_graph(64);
  const std::vector<at::Tensor> inputs{at::randn({256, 256}, at::kCUDA)};
  Options unmeasured;
  unmeasured.cuda.measure_ms = 0;              // the plan itself: not the measured choice among caps
  unmeasured.cuda.memory_budget.ratio = 1000;  // nor capped to fit 1.3 times one stream's pool
  const CompiledModel compiled = compile(graph, inputs, unmeasured);
  EXPECT_EQ(compiled.stats().streams, 64);
  expect_close(compiled.run(inputs), eager_cuda(graph, inputs), "64 branches");
}

TEST(CompiledModelCuda, AThousandReplaysWithFreshInputsMatchEager) {
  OPARA_REQUIRE_GPU();
  OPARA_REQUIRE_MODEL("branchy");
  NoTf32 no_tf32;
  const Loaded loaded = reference_of("branchy", "pt");
  const Graph graph = load(loaded.path);
  const CompiledModel compiled = compile(graph, to_cuda(loaded.inputs));
  EagerExecutor eager(graph, c10::Device(c10::kCUDA, 0));
  for (int i = 0; i < 1000; ++i) {
    const at::Tensor x = at::randn(loaded.inputs[0].sizes(), at::kCUDA);
    const auto expected = flatten_tensors(eager.run({x}));
    const auto actual = compiled.run({x});
    ASSERT_TRUE(at::allclose(actual[0], expected[0], 1e-4, 1e-5)) << "replay " << i;
  }
}

// Threads on streams of their own share one model: each run's cloned outputs are its own even
// when the next run, on another stream, overwrites the model's buffers at once. And two models
// compiled one after the other replay concurrently without sharing a cuBLAS workspace.
TEST(CompiledModelCuda, ThreadsOnTheirOwnStreamsGetTheirOwnOutputs) {
  OPARA_REQUIRE_GPU();
  OPARA_REQUIRE_MODEL("bert_base");  // matrix products: cuBLAS workspaces
  NoTf32 no_tf32;
  const Loaded loaded = reference_of("bert_base", "pt");
  const Graph graph = load(loaded.path);
  const std::vector<at::Tensor> inputs = to_cuda(loaded.inputs);
  const CompiledModel first = compile(graph, inputs);
  const CompiledModel second = compile(graph, inputs);
  // Different inputs per thread, so that a run reading another's buffers gives itself away.
  std::vector<std::vector<at::Tensor>> thread_inputs;
  std::vector<std::vector<at::Tensor>> expected;
  for (int thread = 0; thread < 4; ++thread) {
    std::vector<at::Tensor> mine = inputs;
    mine[0] = at::randint(0, 1000, inputs[0].sizes(), inputs[0].options());
    expected.push_back(eager_cuda(graph, mine));
    thread_inputs.push_back(std::move(mine));
  }
  torch::cuda::synchronize();
  std::vector<std::future<int>> wrong;
  for (int thread = 0; thread < 4; ++thread) {
    wrong.push_back(std::async(std::launch::async, [&, thread] {
      const c10::cuda::CUDAStreamGuard own(c10::cuda::getStreamFromPool());
      const CompiledModel& model = thread % 2 == 0 ? first : second;
      int mismatches = 0;
      for (int i = 0; i < 20; ++i) {
        const std::vector<at::Tensor> outputs = model.run(thread_inputs[thread]);
        for (std::size_t k = 0; k < outputs.size(); ++k) {
          mismatches += at::allclose(outputs[k], expected[thread][k], 1e-4, 1e-5) ? 0 : 1;
        }
      }
      return mismatches;
    }));
  }
  for (int thread = 0; thread < 4; ++thread) EXPECT_EQ(wrong[thread].get(), 0) << "thread " << thread;
}

TEST(CompiledModelCuda, BadInputsAreNamed) {
  OPARA_REQUIRE_GPU();
  OPARA_REQUIRE_MODEL("branchy");
  NoTf32 no_tf32;
  const Loaded loaded = reference_of("branchy", "pt");
  const CompiledModel compiled = compile(loaded.path, to_cuda(loaded.inputs));
  const at::Tensor x = loaded.inputs.at(0).cuda();
  EXPECT_THAT([&] { compiled.run({}); },
              ::testing::ThrowsMessage<Error>(
                  AllOf(HasSubstr("branchy_b1.pt"), HasSubstr("compiled for 1 inputs"), HasSubstr("0 were given"))));
  EXPECT_THAT([&] { compiled.run({x, x}); }, ::testing::ThrowsMessage<Error>(HasSubstr("2 were given")));
  std::vector<std::int64_t> other_shape = x.sizes().vec();
  other_shape[0] += 1;
  EXPECT_THAT(
      [&] { compiled.run({at::zeros(other_shape, x.options())}); },
      ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("input 0"), HasSubstr("has shape"),
                                            HasSubstr(fmt::format("compiled for [{}]", fmt::join(x.sizes(), ", "))),
                                            HasSubstr("compile again"))));
  EXPECT_THAT([&] { compiled.run(loaded.inputs); }, ::testing::ThrowsMessage<Error>(HasSubstr("is on cpu")));
  EXPECT_THAT([&] { compiled.run({x.to(at::kHalf)}); }, ::testing::ThrowsMessage<Error>(HasSubstr("dtype Half")));
  // Still usable after the errors.
  expect_close(compiled.run({x}), eager_cuda(compiled.graph(), {x}), "after bad inputs");
}

// On a GPU the nodes run inside CUDA graphs: run_traced says to trace the kernels with CUPTI.
TEST(CompiledModelCuda, ATracedRunIsRefusedNamingCupti) {
  OPARA_REQUIRE_GPU();
  OPARA_REQUIRE_MODEL("branchy");
  const Loaded loaded = reference_of("branchy", "pt");
  const CompiledModel compiled = compile(loaded.path, to_cuda(loaded.inputs));
  std::vector<CompiledModel::NodeSpan> spans;
  EXPECT_THAT([&] { compiled.run_traced(to_cuda(loaded.inputs), spans); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("branchy_b1.pt"), HasSubstr("CUPTI"))));
  EXPECT_THAT(spans, IsEmpty());
}

// Options::Outputs::kView: run() returns the static output buffers themselves, equal to eager's
// outputs and overwritten by the next run(); kClone's outputs are the caller's to keep.
TEST(CompiledModelCuda, ViewOutputsAreOverwrittenByTheNextRunAndClonesAreNot) {
  OPARA_REQUIRE_GPU();
  OPARA_REQUIRE_MODEL("branchy");
  NoTf32 no_tf32;
  const Loaded loaded = reference_of("branchy", "pt");
  const Graph graph = load(loaded.path);
  const std::vector<at::Tensor> first_inputs = to_cuda(loaded.inputs);
  const std::vector<at::Tensor> second_inputs{at::randn_like(first_inputs[0])};
  const auto first_expected = eager_cuda(graph, first_inputs);
  const auto second_expected = eager_cuda(graph, second_inputs);
  for (std::size_t k = 0; k < first_expected.size(); ++k) {
    ASSERT_FALSE(at::allclose(first_expected[k], second_expected[k], 1e-4, 1e-5))
        << "output " << k << " does not depend on the input: an overwrite would not show";
  }
  Options view_options;
  view_options.outputs = Options::Outputs::kView;
  const CompiledModel views = compile(graph, first_inputs, view_options);
  const CompiledModel clones = compile(graph, first_inputs);

  const std::vector<at::Tensor> view_first = views.run(first_inputs);
  const std::vector<at::Tensor> clone_first = clones.run(first_inputs);
  expect_close(view_first, first_expected, "view, first run");
  expect_close(clone_first, first_expected, "clone, first run");

  const std::vector<at::Tensor> view_second = views.run(second_inputs);
  const std::vector<at::Tensor> clone_second = clones.run(second_inputs);
  ASSERT_EQ(view_second.size(), view_first.size());
  ASSERT_EQ(clone_second.size(), clone_first.size());
  for (std::size_t k = 0; k < view_first.size(); ++k) {
    EXPECT_EQ(view_second[k].data_ptr(), view_first[k].data_ptr()) << "view output " << k << " moved";
    EXPECT_NE(clone_second[k].data_ptr(), clone_first[k].data_ptr()) << "clone output " << k << " was reused";
  }
  expect_close(view_second, second_expected, "view, second run");
  expect_close(view_first, second_expected, "the first run's view, after the second run");
  expect_close(clone_second, second_expected, "clone, second run");
  expect_close(clone_first, first_expected, "the first run's clone, after the second run");
}

// What compile() reports of its capture: time, the nodes and CUDA graph nodes captured, and memory.
TEST(CompiledModelCuda, StatsDescribeTheCapture) {
  OPARA_REQUIRE_GPU();
  const std::string model = testing::model_exported("googlenet") ? "googlenet" : "branchy";
  OPARA_REQUIRE_MODEL(model);
  const Loaded loaded = reference_of(model, "pt");
  const CompiledModel compiled = compile(loaded.path, to_cuda(loaded.inputs));
  const CompiledStats stats = compiled.stats();
  const Graph& graph = compiled.graph();
  std::size_t kernel_nodes = 0;  // those in CUDA graphs, not in host steps
  for (const Node& node : graph.nodes()) {
    kernel_nodes += node.has(kLaunchesKernel) && !compiled.host_nodes()[node.id] ? 1 : 0;
  }
  EXPECT_EQ(stats.device, "cuda:0");
  EXPECT_GT(stats.capture_ms, 0) << model;
  EXPECT_EQ(stats.captured_nodes, kernel_nodes) << model;
  EXPECT_GT(stats.captured_nodes, 0u) << model;
  EXPECT_LE(stats.captured_nodes, graph.size()) << model;
  EXPECT_GT(stats.graph_nodes, 0u) << model;
  EXPECT_GT(stats.pool_bytes, 0u) << model;
  EXPECT_GT(stats.peak_bytes, 0u) << model;
  EXPECT_GE(stats.compile_ms, stats.capture_ms) << model;
}

// Both protections captured, the smaller pool kept: stats say which, and the kept graph is right.
TEST(CompiledModelCuda, SmallerPoolKeepsTheGraphWhosePoolIsSmaller) {
  OPARA_REQUIRE_GPU();
  OPARA_REQUIRE_MODEL("branchy");
  NoTf32 no_tf32;
  const Loaded loaded = reference_of("branchy", "pt");
  const Graph graph = load(loaded.path);
  const auto inputs = to_cuda(loaded.inputs);
  Options options;
  options.cuda.memory = MemoryProtection::kSmallerPool;
  const CompiledModel compiled = compile(graph, inputs, options);
  const CompiledStats stats = compiled.stats();
  EXPECT_GT(stats.pool_bytes_record_stream, 0u);
  EXPECT_GT(stats.pool_bytes_keep_alive, 0u);
  const bool keep_alive = stats.pool_bytes_keep_alive < stats.pool_bytes_record_stream;
  EXPECT_EQ(stats.memory, keep_alive ? MemoryProtection::kKeepAlive : MemoryProtection::kRecordStream);
  EXPECT_EQ(stats.pool_bytes, std::min(stats.pool_bytes_record_stream, stats.pool_bytes_keep_alive));
  expect_close(compiled.run(inputs), eager_cuda(graph, inputs), "smaller pool");
  // One protection only: the other pool is not measured.
  EXPECT_EQ(compile(graph, inputs).stats().pool_bytes_keep_alive, 0u);
}

TEST(CompiledModelCuda, HalfPrecisionModelsAreCloseToEager) {
  OPARA_REQUIRE_GPU();
  const testing::ExportedModels models = testing::exported_models({"branchy_float16", "branchy_bfloat16"});
  if (models.exported.empty()) GTEST_SKIP() << models.missing_text();
  for (const std::string& model : models.exported) {
    for (const char* extension : {"pt", "pt2"}) {
      const Loaded loaded = reference_of(model, extension);
      const Graph graph = load(loaded.path);
      const auto inputs = to_cuda(loaded.inputs);
      const auto expected = eager_cuda(graph, inputs);
      for (StreamPolicy streams : {StreamPolicy::kOpara, StreamPolicy::kSingle}) {
        Options options;
        options.plan.streams = streams;
        const auto actual = compile(graph, inputs, options).run(inputs);
        const std::string label = fmt::format("{}.{} {}", model, extension, to_string(streams));
        ASSERT_EQ(actual.size(), expected.size()) << label;
        for (std::size_t k = 0; k < actual.size(); ++k) {
          const at::ScalarType dtype = expected[k].scalar_type();
          EXPECT_TRUE(dtype == at::kHalf || dtype == at::kBFloat16) << label << ": output " << k << " is " << dtype;
          EXPECT_EQ(actual[k].scalar_type(), dtype) << label << ", output " << k;
        }
        expect_close(actual, expected, label);  // at the dtype's tolerance
      }
    }
  }
}

// y = x.sin(); n = int(y.sum() > 0) (a host synchronisation the op table does not know); z = y * n + 1.
// With `n_as_cpu_tensor`, n is a 0-dim CPU tensor (aten::NumToTensor's way), +1 or -1: a value the
// capture of the graph after it bakes in.
Graph graph_with_item(bool n_as_cpu_tensor = false) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId y = graph.add_node("test::sin", {x}, {"Tensor"}, kLaunchesKernel,
                                  testing::unary([](const at::Tensor& t) { return t.sin(); }));
  const NodeId n = graph.add_node("test::positive", {graph.node(y).outputs[0]}, {n_as_cpu_tensor ? "Tensor" : "int"},
                                  kLaunchesKernel, testing::op([n_as_cpu_tensor](const std::vector<c10::IValue>& in) {
                                    const bool positive = in[0].toTensor().sum().item<double>() > 0;
                                    if (n_as_cpu_tensor)
                                      return std::vector<c10::IValue>{at::scalar_tensor(positive ? 1.0 : -1.0)};
                                    return std::vector<c10::IValue>{static_cast<std::int64_t>(positive)};
                                  }));
  const NodeId z = graph.add_node(
      "test::scale", {graph.node(y).outputs[0], graph.node(n).outputs[0]}, {"Tensor"}, kLaunchesKernel,
      testing::op([](const std::vector<c10::IValue>& in) {
        const at::Tensor& y = in[0].toTensor();
        return std::vector<c10::IValue>{(in[1].isTensor() ? y * in[1].toTensor() : y * in[1].toInt()) + 1};
      }));
  graph.add_output(graph.node(z).outputs[0]);
  return graph;
}

TEST(CompiledModelCuda, AnOperationThatFailsCaptureBecomesAHostStep) {
  OPARA_REQUIRE_GPU();
  const Graph graph = graph_with_item();
  const at::Tensor positive = at::ones({64}, at::kCUDA);
  const CompiledModel compiled = compile(graph, {positive});
  EXPECT_TRUE(compiled.host_nodes()[1]);
  EXPECT_EQ(compiled.stats().segments, 3u);
  expect_close(compiled.run({positive}), eager_cuda(graph, {positive}), "host step");
  // Another scalar than the one captured: the rest of the run goes eagerly, still right.
  const at::Tensor negative = -at::ones({64}, at::kCUDA) * 2;
  expect_close(compiled.run({negative}), eager_cuda(graph, {negative}), "eager fallback");
  EXPECT_EQ(compiled.stats().eager_fallbacks, 1u);

  Options strict;
  strict.cuda.on_uncapturable = CudaOptions::OnUncapturable::kError;
  try {
    compile(graph, {positive}, strict);
    FAIL() << "captured a host synchronisation";
  } catch (const CaptureError& error) {
    EXPECT_EQ(error.node(), 1);
    EXPECT_THAT(error.what(), HasSubstr("test::positive"));
  }
  // The failed capture left nothing behind: the default generator is out of capture mode (a
  // random op would throw "Offset increment outside graph capture") and the device is usable.
  EXPECT_NO_THROW(at::randn({64}, at::kCUDA).sum().item<float>());
  expect_close(compiled.run({positive}), eager_cuda(graph, {positive}), "after a failed capture");
}

TEST(CompiledModelCuda, ACpuScalarFromAHostStepIsBakedInAndANewValueRunsEagerly) {
  OPARA_REQUIRE_GPU();
  const Graph graph = graph_with_item(/*n_as_cpu_tensor=*/true);
  const at::Tensor positive = at::ones({64}, at::kCUDA);
  const CompiledModel compiled = compile(graph, {positive});
  ASSERT_TRUE(compiled.host_nodes()[1]);
  expect_close(compiled.run({positive}), eager_cuda(graph, {positive}), "the captured value");
  EXPECT_EQ(compiled.stats().eager_fallbacks, 0u);
  const at::Tensor negative = -at::ones({64}, at::kCUDA);
  expect_close(compiled.run({negative}), eager_cuda(graph, {negative}), "another value");
  EXPECT_EQ(compiled.stats().eager_fallbacks, 1u);
}

// ---- CPU overflow on the GPU (skipped without one) ----------------------------------------------

struct OverflowCase {
  const char* model;
  std::vector<std::string> cpu_nodes;
};

// Nodes sent to the CPU by name: host steps on pinned copies, with the graph work they do not
// read running meanwhile, give eager's outputs run after run, with fresh inputs too.
TEST(CompiledModelCuda, NodesOnTheCpuGiveEagersOutputs) {
  OPARA_REQUIRE_GPU();
  NoTf32 no_tf32;
  const std::vector<OverflowCase> cases{
      {"multihead_rnn", {"aten::sigmoid_", "aten::tanh_", "aten::tanh", "aten::mul", "aten::add_"}},
      {"detect", {"aten::argsort", "aten::triu", "aten::max", "aten::le"}},
      {"branchy", {"aten::relu"}},
      {"inplace", {"aten::add_", "aten::mul"}},
      {"googlenet", {"aten::max_pool2d", "aten::cat"}},
  };
  std::vector<std::string> names;
  for (const OverflowCase& c : cases) names.emplace_back(c.model);
  const testing::ExportedModels models = testing::exported_models(names);
  if (models.exported.empty()) GTEST_SKIP() << models.missing_text();
  for (const OverflowCase& c : cases) {
    if (!models.has(c.model)) continue;  // named in the test's note
    const Loaded loaded = reference_of(c.model, "pt");
    const Graph graph = load(loaded.path);
    const auto inputs = to_cuda(loaded.inputs);
    Options options;
    options.overflow.policy = OverflowPolicy::kManual;
    options.overflow.cpu_nodes = c.cpu_nodes;
    const CompiledModel compiled = compile(graph, inputs, options);
    const CompiledStats stats = compiled.stats();
    EXPECT_GE(stats.segments, 2u) << c.model;
    for (int run = 0; run < 3; ++run) {
      expect_close(compiled.run(inputs), eager_cuda(graph, inputs), fmt::format("{} run {}", c.model, run));
    }
    std::vector<at::Tensor> fresh;
    for (const at::Tensor& input : inputs) {
      fresh.push_back(input.is_floating_point() ? at::randn_like(input) : input.clone());
    }
    expect_close(compiled.run(fresh), eager_cuda(graph, fresh), fmt::format("{} fresh inputs", c.model));
    if (stats.cpu_nodes > 0) {
      EXPECT_GT(stats.bytes_to_host + stats.bytes_to_device, 0u) << c.model;
      EXPECT_GT(compiled.stats().host_ms, 0) << c.model;
    }
  }
}

// A full profile of `graph` (CUPTI's GPU times, host times, copy bandwidths) recorded here, as
// Options::overflow = kCommSd needs; its path.
std::string record_profile(const std::string& model, const Graph& graph, const std::vector<at::Tensor>& inputs) {
  ProfilerOptions options;
  options.runs = 3;
  options.require_cupti = true;  // Comm+SD weighs measured GPU times, not the static estimate
  const std::string path = testing::scratch_path(model + ".comm_sd.profile.json");
  save_profile(ModelProfiler(graph, c10::Device(c10::kCUDA, 0), options).profile(inputs), path);
  return path;
}

// Whatever Comm+SD moves to the CPU, the outputs are eager's, and it predicts the run it chose.
TEST(CompiledModelCuda, CommSdOnAFreshProfileGivesEagersOutputs) {
  OPARA_REQUIRE_GPU();
  NoTf32 no_tf32;
  const testing::ExportedModels models = testing::exported_models({"detect", "multihead_rnn"});
  if (models.exported.empty()) GTEST_SKIP() << models.missing_text();
  for (const std::string& model : models.exported) {
    const Loaded loaded = reference_of(model, "pt");
    const Graph graph = load(loaded.path);
    const auto inputs = to_cuda(loaded.inputs);
    Options options;
    options.overflow.policy = OverflowPolicy::kCommSd;
    options.costs.profile = record_profile(model, graph, loaded.inputs);
    const CompiledModel compiled = compile(graph, inputs, options);
    EXPECT_GT(compiled.stats().predicted_us, 0) << model;
    for (int run = 0; run < 2; ++run) {
      expect_close(compiled.run(inputs), eager_cuda(graph, inputs),
                   fmt::format("{} comm_sd ({} nodes on the CPU), run {}", model, compiled.stats().cpu_nodes, run));
    }
  }
}

// Comm+SD keeps a move only where its estimate says the run gets faster: on GoogLeNet it moves
// nothing, or the run is no more than 5% slower than with every node on the GPU (medians of 50
// runs each, interleaved so that clock and load drift hit both alike).
TEST(CompiledModelCuda, CommSdOnGoogLeNetIsNoSlowerThanTheGpuAlone) {
  OPARA_REQUIRE_GPU();
  OPARA_REQUIRE_MODEL("googlenet");
  const Loaded loaded = reference_of("googlenet", "pt");
  const Graph graph = load(loaded.path);
  const auto inputs = to_cuda(loaded.inputs);
  Options comm_sd;
  comm_sd.overflow.policy = OverflowPolicy::kCommSd;
  comm_sd.costs.profile = record_profile("googlenet", graph, loaded.inputs);
  const CompiledModel moved = compile(graph, inputs, comm_sd);
  const std::size_t cpu_nodes = moved.stats().cpu_nodes;
  if (cpu_nodes == 0) return;  // the same graphs as kNone's
  const CompiledModel gpu_only = compile(graph, inputs);
  const auto run_ms = [&](const CompiledModel& model) {
    torch::cuda::synchronize();
    const auto started = std::chrono::steady_clock::now();
    model.run(inputs);
    torch::cuda::synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  };
  for (int i = 0; i < 10; ++i) {  // warm-up: host threads, pinned buffers, clocks
    run_ms(moved);
    run_ms(gpu_only);
  }
  std::vector<double> moved_ms;
  std::vector<double> gpu_ms;
  for (int i = 0; i < 50; ++i) {
    if (i % 2 == 0) {  // either goes first half the time
      moved_ms.push_back(run_ms(moved));
      gpu_ms.push_back(run_ms(gpu_only));
    } else {
      gpu_ms.push_back(run_ms(gpu_only));
      moved_ms.push_back(run_ms(moved));
    }
  }
  const double moved_median = percentile(moved_ms, 0.5);
  const double gpu_median = percentile(gpu_ms, 0.5);
  // 5%, and 20 us for the host clock around a run of about a millisecond.
  EXPECT_LE(moved_median, std::max(1.05 * gpu_median, gpu_median + 0.02))
      << cpu_nodes << " nodes on the CPU: " << moved_median << " ms a run, " << gpu_median << " ms on the GPU alone";
}

// The LSTM heads of multihead_rnn write their gates in place inside each cell: sending whole
// cells to the CPU keeps them there (nothing is taken back for aliasing), and copies both ways.
TEST(CompiledModelCuda, MultiheadRnnCellsStayOnTheCpu) {
  OPARA_REQUIRE_GPU();
  OPARA_REQUIRE_MODEL("multihead_rnn");
  NoTf32 no_tf32;
  const Loaded loaded = reference_of("multihead_rnn", "pt");
  const Graph graph = load(loaded.path);
  const auto inputs = to_cuda(loaded.inputs);
  Options options;
  options.overflow.policy = OverflowPolicy::kManual;
  options.overflow.cpu_nodes = {"aten::linear", "aten::sigmoid_", "aten::tanh_",
                                "aten::tanh",   "aten::mul",      "aten::add_"};
  const CompiledModel compiled = compile(graph, inputs, options);
  EXPECT_GT(compiled.stats().cpu_nodes, graph.size() / 2);
  EXPECT_GT(compiled.stats().bytes_to_host, 0u);
  EXPECT_GT(compiled.stats().bytes_to_device, 0u);
  expect_close(compiled.run(inputs), eager_cuda(graph, inputs), "multihead_rnn cells on the CPU");
}

// A random CPU mask over random models (views, lists, several outputs): every cut runs right.
TEST(CompiledModelCuda, RandomCpuNodesOnRandomModelsMatchEager) {
  OPARA_REQUIRE_GPU();
  NoTf32 no_tf32;
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    const Graph graph = testing::random_model(10 + static_cast<int>(seed % 30), seed);
    std::mt19937_64 random(seed);
    std::bernoulli_distribution coin(0.3);
    Options options;
    options.overflow.policy = OverflowPolicy::kManual;
    for (const Node& node : graph.nodes()) {
      if (node.has(kLaunchesKernel) && coin(random)) options.overflow.cpu_nodes.push_back(std::to_string(node.id));
    }
    if (options.overflow.cpu_nodes.empty()) options.overflow.cpu_nodes.push_back("0");
    const std::vector<at::Tensor> inputs{at::randn({4, 6}, at::kCUDA), at::randn({4, 6}, at::kCUDA)};
    const CompiledModel compiled = compile(graph, inputs, options);
    for (int run = 0; run < 2; ++run) {
      expect_close(compiled.run(inputs), eager_cuda(graph, inputs), fmt::format("seed {} run {}", seed, run));
    }
  }
}

}  // namespace
}  // namespace opara
