// The reference executor reproduces each model's own forward bit for bit on the CPU, in both
// formats, frees intermediates as it goes, and names the node that fails.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "exec/eager_executor.h"
#include "exec/outputs.h"
#include "graph/graph_analysis.h"
#include "model_files.h"
#include "opara/error.h"
#include "opara/load.h"
#include "random_models.h"
#include "tools/model_inputs.h"
#include "tools/reference_forward.h"

namespace opara {
namespace {

using ::testing::HasSubstr;

struct Case {
  std::string model;
  std::string extension;
  friend std::ostream& operator<<(std::ostream& out, const Case& c) { return out << c.model << "." << c.extension; }
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const auto* models : {&testing::all_models(), &testing::half_precision_models()}) {
    for (const std::string& model : *models) {
      cases.push_back({model, "pt"});
      cases.push_back({model, "pt2"});
    }
  }
  return cases;
}

class MatchesForward : public ::testing::TestWithParam<Case> {};

TEST_P(MatchesForward, OutputsAreBitwiseTheModelsOwn) {
  const Case& c = GetParam();
  OPARA_REQUIRE_MODEL(c.model);
  const std::string path = testing::model_path(c.model, c.extension);
  const auto [tensors, inputs, expected] = testing::format_reference(c.model, c.extension);
  EagerExecutor executor(load(path));
  const auto outputs = flatten_tensors(executor.run(inputs));
  // The exporter's record of the format's own forward (the exported program's module for .pt2).
  EXPECT_TRUE(bitwise_equal(outputs, expected)) << "max |diff| " << max_abs_difference(outputs, expected);
  if (c.extension == "pt") {
    // And the TorchScript module's forward run here, in this process.
    EXPECT_TRUE(bitwise_equal(outputs, torchscript_forward(path, tensors)));
  }
  EXPECT_GT(executor.peak_live_values(), 0u);
  EXPECT_LT(executor.peak_live_values(), executor.graph().values().size());
}

INSTANTIATE_TEST_SUITE_P(AllModels, MatchesForward, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.model + "_" + info.param.extension; });

TEST(EagerExecutor, ChainKeepsFewIntermediatesAlive) {
  OPARA_REQUIRE_MODEL("chain");
  const Reference reference = load_reference(testing::model_path("chain", "ref.pt"));
  EagerExecutor executor(load(testing::model_path("chain", "pt2")));
  executor.run({reference.inputs[0]});
  // A chain frees each value as soon as the next op has read it.
  EXPECT_LE(executor.peak_live_values(), 3u);
}

TEST(EagerExecutor, RepeatedRunsAgree) {
  OPARA_REQUIRE_MODEL("inplace");
  const Reference reference = load_reference(testing::model_path("inplace", "ref.pt"));
  EagerExecutor executor(load(testing::model_path("inplace", "pt")));
  const auto first = flatten_tensors(executor.run({reference.inputs[0]}));
  const auto second = flatten_tensors(executor.run({reference.inputs[0]}));
  EXPECT_TRUE(bitwise_equal(first, second));
  EXPECT_TRUE(bitwise_equal(first, reference.outputs_pt));
}

TEST(EagerExecutor, WrongInputCountNamesTheInputs) {
  OPARA_REQUIRE_MODEL("bert_base");
  EagerExecutor executor(load(testing::model_path("bert_base", "pt2")));
  try {
    executor.run({at::zeros({1, 32}, at::kLong)});
    FAIL() << "no error for a missing input";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("takes 2 inputs (input_ids, attention_mask), 1 were given"));
  }
}

// Orders come from opara's own schedules, which are topological by construction.
TEST(EagerExecutor, ANonTopologicalOrderIsAnInternalError) {
  OPARA_REQUIRE_MODEL("chain");
  const Reference reference = load_reference(testing::model_path("chain", "ref.pt"));
  const Graph graph = load(testing::model_path("chain", "pt2"));
  EagerExecutor executor(graph);
  std::vector<NodeId> backwards = topological_order(graph);
  std::reverse(backwards.begin(), backwards.end());
  EXPECT_THAT([&] { executor.run({reference.inputs[0]}, backwards); },
              ::testing::ThrowsMessage<InternalError>(HasSubstr("EagerExecutor given a non-topological order")));
}

TEST(EagerExecutor, AFailingNodeIsNamed) {
  OPARA_REQUIRE_MODEL("inplace");
  for (const char* extension : {"pt", "pt2"}) {
    EagerExecutor executor(load(testing::model_path("inplace", extension)));
    try {
      executor.run({at::zeros({1, 5, 16, 16})});  // 5 channels where the first conv takes 3
      FAIL() << "no error for a wrong input shape";
    } catch (const Error& error) {
      EXPECT_THAT(error.what(), HasSubstr("node 0 (aten::"));
      EXPECT_THAT(error.what(), HasSubstr("inplace_b1"));
    }
  }
}

// A graph built in memory has no file: its failing node is named in the "graph".
TEST(EagerExecutor, AFailingNodeOfAGraphBuiltInMemoryIsNamed) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId fails =
      graph.add_node("test::fails", {x}, {"Tensor"}, kLaunchesKernel,
                     testing::unary([](const at::Tensor&) -> at::Tensor { throw std::runtime_error("no"); }));
  graph.add_output(graph.node(fails).outputs[0]);
  EXPECT_THAT([&] { EagerExecutor(graph).run({at::ones({2})}); },
              ::testing::ThrowsMessage<Error>(::testing::StartsWith("graph: node 0 (test::fails) failed: no")));
}

// On another device (meta stands in for CUDA here), every op runs with its constants there
// (NodeOp::to): the random models' matmul weight goes along, as an importer's weights do, or the
// first run on the GPU fails ("mat2 is on cpu") whatever the executor.
TEST(EagerExecutor, OnAnotherDeviceTheOpsTakeTheirConstantsAlong) {
  const c10::Device meta(c10::kMeta);
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    const Graph graph = testing::random_model(10 + static_cast<int>(seed % 30), seed);
    std::vector<at::Tensor> outputs;
    try {
      outputs = flatten_tensors(EagerExecutor(graph, meta).run({at::randn({4, 6}), at::randn({4, 6})}));
    } catch (const Error& error) {
      FAIL() << "seed " << seed << ": " << error.what();
    }
    for (const at::Tensor& output : outputs) EXPECT_TRUE(output.is_meta()) << "seed " << seed;
  }
}

// The same executor on the GPU: kernels differ from the CPU's, so outputs are compared with a
// tolerance (TF32 is off by default in LibTorch for matmuls, so float32 stays close).
TEST(EagerExecutorCuda, MatchesTheReferenceWithinTolerance) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU visible: the CUDA eager path is not run here";
  for (const char* model : {"inplace", "branchy", "googlenet", "bert_base"}) {
    OPARA_REQUIRE_MODEL(model);
    const Reference reference = load_reference(testing::model_path(model, "ref.pt"));
    const std::vector<c10::IValue> inputs(reference.inputs.begin(), reference.inputs.end());
    for (const char* extension : {"pt", "pt2"}) {
      EagerExecutor executor(load(testing::model_path(model, extension)), c10::Device(c10::kCUDA, 0));
      const auto outputs = flatten_tensors(executor.run(inputs));
      ASSERT_FALSE(outputs.empty());
      EXPECT_TRUE(outputs[0].is_cuda()) << model << "." << extension;
      const auto& expected = std::string(extension) == "pt" ? reference.outputs_pt : reference.outputs_pt2;
      EXPECT_LT(max_abs_difference(outputs, expected), 1e-3) << model << "." << extension;
    }
  }
}

}  // namespace
}  // namespace opara
