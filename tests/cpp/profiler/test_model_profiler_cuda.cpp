// The profiler on a GPU: CUPTI records, attribution, demands and classes on real models. Skipped
// without a GPU, except the one test of what happens without one.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "model_files.h"
#include "opara/compiled_model.h"
#include "opara/error.h"
#include "opara/load.h"
#include "opara/model_profiler.h"
#include "profile/kernel_attribution.h"
#include "profiler/cupti_profiler.h"
#include "profiler/device_limits.h"
#include "profiler/host_costs.h"
#include "profiler/torch_profiler_state.h"
#include "schedule/stages.h"

namespace opara {
namespace {

using ::testing::HasSubstr;

Profile profile_of(const std::string& name, int runs = 3) {
  const Graph graph = load(testing::model_path(name, "pt"));
  ProfilerOptions options;
  options.runs = runs;
  options.require_cupti = true;
  int runs_reported = 0;  // what a progress bar sees
  options.after_run = [&runs_reported] { ++runs_reported; };
  const ModelProfiler profiler(graph, c10::Device(c10::kCUDA, 0), options);
  Profile profile = profiler.profile(testing::format_reference(name, "pt").tensors);
  EXPECT_EQ(runs_reported, profiler.total_runs());
  return profile;
}

void expect_every_kernel_attributed(const Profile& profile, const Graph& graph) {
  EXPECT_EQ(profile.demand_source, "cupti");
  EXPECT_TRUE(profile.unattributed_kernels.empty()) << profile.unattributed_kernels.size() << " kernels of no node, "
                                                    << "the first " << profile.unattributed_kernels.front().name;
  EXPECT_TRUE(profile.silent_nodes.empty()) << graph.describe(profile.silent_nodes.front()) << " launched nothing";
  for (const NodeProfile& node : profile.nodes) {
    const std::string what = graph.describe(node.id);
    if (node.expects_device_work) {
      EXPECT_FALSE(node.kernels.empty() && node.copies.empty()) << what;
      EXPECT_GT(node.gpu_ns, 0) << what;
    }
    if (!node.kernels.empty()) {
      EXPECT_GT(node.demand.demand, 0) << what;
      EXPECT_LE(node.demand.demand, 1) << what;
      for (double fraction : {node.demand.thread_fraction, node.demand.register_fraction, node.demand.smem_fraction}) {
        EXPECT_GE(fraction, 0) << what;
        EXPECT_LE(fraction, 1 + 1e-9) << what;
      }
    }
    if (!graph.node(node.id).has(kLaunchesKernel)) {
      EXPECT_TRUE(node.kernels.empty()) << what;
    }
  }
}

TEST(ModelProfilerCuda, GoogLeNetAttributesEveryKernelAndClassifiesIt) {
  OPARA_REQUIRE_GPU();
  OPARA_REQUIRE_MODEL("googlenet");
  const std::string path = testing::model_path("googlenet", "pt");
  const Graph graph = load(path);
  const Profile profile = profile_of("googlenet");
  ASSERT_EQ(profile.nodes.size(), graph.size());
  expect_every_kernel_attributed(profile, graph);
  std::size_t convolutions = 0;
  std::size_t compute_convolutions = 0;
  for (const NodeProfile& node : profile.nodes) {
    const std::string what = graph.describe(node.id);
    if (node.kind == "aten::_convolution" || node.kind == "aten::relu_" || node.kind == "aten::cat" ||
        node.kind == "aten::max_pool2d" || node.kind == "aten::linear") {
      EXPECT_TRUE(node.expects_device_work) << what;
      EXPECT_FALSE(node.kernels.empty()) << what;
    }
    if (node.kind == "aten::_convolution") {
      ++convolutions;
      compute_convolutions += node.op_class == OpClass::kCompute;
    }
    if (node.kind == "aten::relu_" || node.kind == "aten::max_pool2d") {
      EXPECT_EQ(node.op_class, OpClass::kMemory) << what;
    }
  }
  EXPECT_EQ(convolutions, 57u);
  // The measurement may demote a small convolution that mostly moved its weights; most stay.
  EXPECT_GT(compute_convolutions, convolutions / 2);
  EXPECT_EQ(profile.model_hash, hash_model_file(path));
  EXPECT_EQ(profile.device, device_limits(0));
  EXPECT_GT(profile.eager_run_ms, 0);
  EXPECT_GT(profile.profiled_run_ms, 0);
  EXPECT_GT(profile.h2d_bytes_per_s, 1e9);
  EXPECT_GT(profile.d2h_bytes_per_s, 1e9);
}

TEST(ModelProfilerCuda, BranchyReluAndAddAreMemoryBoundAndTheProfileDrivesCompile) {
  OPARA_REQUIRE_GPU();
  OPARA_REQUIRE_MODEL("branchy");
  const std::string path = testing::model_path("branchy", "pt");
  const Graph graph = load(path);
  const Profile profile = profile_of("branchy");
  expect_every_kernel_attributed(profile, graph);
  for (const NodeProfile& node : profile.nodes) {
    if (node.kind == "aten::relu" || node.kind == "aten::add") {
      EXPECT_EQ(node.op_class, OpClass::kMemory) << graph.describe(node.id);
    }
  }
  const std::string saved = testing::scratch_path("branchy.profile.json");
  save_profile(profile, saved);
  const std::vector<at::Tensor> inputs = testing::format_reference("branchy", "pt").tensors;
  Options options;
  options.device = c10::Device(c10::kCUDA, 0);
  options.costs.profile = saved;
  const CompiledModel compiled = compile(path, inputs, options);
  EXPECT_EQ(compiled.plan().cost_source, "profile");
  // Another batch size is another profile.
  try {
    compile(path, {at::cat({inputs[0], inputs[0]})}, options);
    FAIL() << "a batch-1 profile was used for batch 2";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("input shapes"));
  }
}

TEST(CuptiProfiler, WithoutAGpuIsUnavailableAndSaysSo) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is present: the message for its absence cannot be shown";
  for (int attempt = 0; attempt < 2; ++attempt) {  // a failed attempt leaves nothing behind
    try {
      CuptiProfiler cupti;
      FAIL() << "CUPTI started without a GPU";
    } catch (const CuptiUnavailable& error) {
      EXPECT_THAT(error.what(), HasSubstr("CUPTI cannot be used here"));
    }
  }
}

TEST(ModelProfilerCuda, CuptiProfilerRecordsAKernelUnderItsNode) {
  OPARA_REQUIRE_GPU();
  const at::Tensor x = at::ones({1 << 20}, at::kCUDA);
  c10::cuda::device_synchronize();  // the fill ran before CUPTI records: it belongs to no node
  CuptiProfiler cupti;
  cupti.push(7);
  const at::Tensor y = x * 2;
  cupti.pop();
  c10::cuda::device_synchronize();
  const Attribution attribution = attribute_activities(cupti.take(), 8);
  EXPECT_EQ(attribution.kernels[7].size(), 1u);
  EXPECT_TRUE(attribution.unattributed_kernels.empty());
  EXPECT_EQ(y.sum().item<double>(), 2.0 * (1 << 20));
}

TEST(ModelProfilerCuda, ASecondCuptiClientIsRefusedAndTheProfilerFallsBack) {
  OPARA_REQUIRE_GPU();
  OPARA_REQUIRE_MODEL("branchy");
  const Graph graph = load(testing::model_path("branchy", "pt"));
  const std::vector<at::Tensor> inputs = testing::format_reference("branchy", "pt").tensors;
  {
    CuptiProfiler holder;
    EXPECT_THROW(CuptiProfiler(), CuptiUnavailable);
    ProfilerOptions options;
    options.runs = 1;
    const Profile fallback = ModelProfiler(graph, c10::Device(c10::kCUDA, 0), options).profile(inputs);
    EXPECT_EQ(fallback.demand_source, "static estimate");
    ASSERT_FALSE(fallback.notes.empty());
    EXPECT_THAT(fallback.notes.back(), HasSubstr("static estimate"));
    options.require_cupti = true;
    EXPECT_THROW(ModelProfiler(graph, c10::Device(c10::kCUDA, 0), options).profile(inputs), CuptiUnavailable);
  }
  CuptiProfiler again;  // the holder let go
}

// torch.profiler with CUDA activities: Kineto holds CUPTI's activity buffers, perhaps without
// subscribing. opara's profile falls back and says why, and with require_cupti refuses naming it.
// Once the trace stopped, Kineto keeps the CUPTI subscription its first trace took until the
// process ends (torch 2.11): a profile then falls back naming the PyTorch profiler, or records
// kernels where a Kineto lets go; it never throws. Returns what went wrong, if anything.
std::string profile_inside_and_after_torch_profiler() {
  namespace kineto = torch::profiler::impl;
  const Graph graph = load(testing::model_path("branchy", "pt"));
  const std::vector<at::Tensor> inputs = testing::format_reference("branchy", "pt").tensors;
  const kineto::ProfilerConfig config(kineto::ProfilerState::KINETO);
  const std::set<kineto::ActivityType> activities{kineto::ActivityType::CPU, kineto::ActivityType::CUDA};
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  ProfilerOptions options;
  options.runs = 1;
  std::string problems;
  Profile fallback;
  std::string required;
  try {
    fallback = ModelProfiler(graph, c10::Device(c10::kCUDA, 0), options).profile(inputs);
    options.require_cupti = true;
    (void)ModelProfiler(graph, c10::Device(c10::kCUDA, 0), options).profile(inputs);
  } catch (const CuptiUnavailable& error) {
    required = error.what();
  } catch (const std::exception& error) {
    problems += std::string("inside the trace, profile threw: ") + error.what() + "\n";
  }
  torch::autograd::profiler::disableProfiler();
  const auto names = [](const std::vector<std::string>& notes, const char* what) {
    return std::any_of(notes.begin(), notes.end(),
                       [&](const std::string& note) { return note.find(what) != std::string::npos; });
  };
  if (fallback.demand_source != "static estimate" || !names(fallback.notes, "torch.profiler")) {
    problems += "inside the trace, the profile did not fall back naming torch.profiler\n";
  }
  if (required.find("torch.profiler") == std::string::npos) {
    problems += "inside the trace, require_cupti's refusal does not name torch.profiler: '" + required + "'\n";
  }
  if (active_torch_profiler()) problems += "the PyTorch profiler still counts as tracing after it stopped\n";
  options.require_cupti = false;
  try {
    const Profile after = ModelProfiler(graph, c10::Device(c10::kCUDA, 0), options).profile(inputs);
    if (after.demand_source == "static estimate" && !names(after.notes, "PyTorch profiler")) {
      problems +=
          "after the trace, the profile fell back without naming the PyTorch profiler: " + after.notes.back() + "\n";
    }
  } catch (const std::exception& error) {
    problems += std::string("after the trace, profile threw: ") + error.what() + "\n";
  }
  return problems;
}

// In a process of its own (a death test's child, started afresh): the subscription Kineto keeps
// would refuse CUPTI to every later test in this one.
TEST(ModelProfilerCuda, InsideTorchProfilerTheProfilerFallsBackAndSaysWhy) {
  OPARA_REQUIRE_GPU();
  OPARA_REQUIRE_MODEL("branchy");
  const std::string style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child starts afresh: no fork of a CUDA process
  EXPECT_EXIT(
      {
        const std::string problems = profile_inside_and_after_torch_profiler();
        std::fprintf(stderr, "%s", problems.c_str());
        std::fflush(stderr);
        std::_Exit(problems.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  GTEST_FLAG_SET(death_test_style, style);
}

}  // namespace
}  // namespace opara
