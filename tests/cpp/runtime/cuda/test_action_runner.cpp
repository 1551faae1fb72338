// The value handling of the CUDA graph capturer, run on the CPU with a recording backend: the
// capture actions of every policy give the model's outputs bit for bit under both memory
// protections, and with record_stream every tensor read on another stream than the one that
// made it is reported on the reading stream before the read (the hazard the allocator must see).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <map>
#include <set>

#include "exec/outputs.h"
#include "model_files.h"
#include "opara/error.h"
#include "opara/load.h"
#include "opara/plan.h"
#include "plan_fixtures.h"
#include "runtime/cuda/action_runner.h"
#include "tools/model_inputs.h"

namespace opara {
namespace {

using ::testing::HasSubstr;

const void* storage_of(const at::Tensor& tensor) {
  return tensor.storage().data();
}

// Logs what the actions do; tracks which stream is current.
class RecordingBackend final : public StreamBackend {
 public:
  void fork(int stream) override { log.push_back(fmt::format("fork {}", stream)); }
  void join(int stream) override { log.push_back(fmt::format("join {}", stream)); }
  void record(int stream, NodeId node) override { log.push_back(fmt::format("record {} {}", stream, node)); }
  void wait(int stream, NodeId node) override { log.push_back(fmt::format("wait {} {}", stream, node)); }
  void enter(int stream) override { current = stream; }
  void read_on(const at::Tensor& tensor, int stream) override {
    EXPECT_EQ(stream, current) << "a read reported on a stream that is not current";
    reads.insert({storage_of(tensor), stream});
  }
  void ran(int stream, NodeId node) override {
    EXPECT_EQ(stream, current) << "node " << node << " reported as run on a stream that is not current";
    log.push_back(fmt::format("ran {} {}", stream, node));
    if (node == break_capture_at) throw NodeError(fmt::format("node {} broke the capture", node), node);
  }

  int current = kOriginStream;
  NodeId break_capture_at = kNoNode;  // ran() throws there, as a capture found invalidated does
  std::vector<std::string> log;
  std::set<std::pair<const void*, int>> reads;
};

// Wraps a node's op: remembers on which stream each storage was first made, and checks, before
// the node runs, that every input made on another stream was reported read on this one. Holds
// every tensor, so that no address is reused within a run.
class CheckingOp final : public NodeOp {
 public:
  struct Shared {
    RecordingBackend* backend = nullptr;
    bool expect_reports = true;
    std::map<const void*, int> made_on;
    std::vector<at::Tensor> held;
    std::vector<std::string> unreported;
  };
  CheckingOp(std::shared_ptr<const NodeOp> inner, NodeId node, std::shared_ptr<Shared> shared)
      : inner_(std::move(inner)), node_(node), shared_(std::move(shared)) {}

  void run(std::vector<c10::IValue>& stack) const override {
    Shared& shared = *shared_;
    const int stream = shared.backend->current;
    auto visit = [&](const c10::IValue& value, auto&& on_tensor) {
      if (value.isTensor()) on_tensor(value.toTensor());
      if (value.isTensorList()) {
        for (const at::Tensor& tensor : value.toTensorList()) on_tensor(tensor);
      }
    };
    for (const c10::IValue& input : stack) {
      visit(input, [&](const at::Tensor& tensor) {
        const auto made = shared.made_on.find(storage_of(tensor));
        if (!shared.expect_reports || made == shared.made_on.end() || made->second == stream) return;
        if (shared.backend->reads.count({storage_of(tensor), stream}) == 0) {
          shared.unreported.push_back(
              fmt::format("node {} on stream {} reads a tensor made on stream {}", node_, stream, made->second));
        }
      });
    }
    inner_->run(stack);
    for (const c10::IValue& output : stack) {
      visit(output, [&](const at::Tensor& tensor) {
        shared.made_on.emplace(storage_of(tensor), stream);
        shared.held.push_back(tensor);
      });
    }
  }
  [[nodiscard]] std::shared_ptr<const NodeOp> to(c10::Device) const override { return nullptr; }

 private:
  std::shared_ptr<const NodeOp> inner_;
  NodeId node_;
  std::shared_ptr<Shared> shared_;
};

struct ModelCase {
  std::string model;
  std::string extension;
};

class ActionRunnerModels : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ActionRunnerModels, EveryPolicyAndMemoryModeGivesTheReferenceAndReportsCrossStreamReads) {
  const ModelCase& c = GetParam();
  OPARA_REQUIRE_MODEL(c.model);
  const Graph graph = load(testing::model_path(c.model, c.extension));
  const auto [tensors, inputs, expected] = testing::format_reference(c.model, c.extension);
  int cross_stream_plans = 0;
  for (const auto& [streams, order] : testing::kExecutedPolicies) {
    const Plan plan = make_plan(graph, PlanOptions{streams, order});
    const auto actions = capture_actions(graph, plan);
    for (MemoryProtection memory : {MemoryProtection::kRecordStream, MemoryProtection::kKeepAlive}) {
      const bool record = memory == MemoryProtection::kRecordStream;
      const std::string label = fmt::format("{}.{} {}/{} {}", c.model, c.extension, to_string(streams),
                                            to_string(order), record ? "record_stream" : "keep_alive");
      RecordingBackend backend;
      auto shared = std::make_shared<CheckingOp::Shared>();
      shared->backend = &backend;
      shared->expect_reports = record;
      std::vector<std::shared_ptr<const NodeOp>> ops;
      for (const Node& node : graph.nodes()) ops.push_back(std::make_shared<CheckingOp>(node.op, node.id, shared));

      const ActionRun run = run_actions(graph, ops, actions, inputs, backend, memory);
      EXPECT_TRUE(bitwise_equal(flatten_tensors(run.outputs), expected)) << label;
      EXPECT_THAT(shared->unreported, ::testing::IsEmpty()) << label;
      EXPECT_EQ(backend.current, kOriginStream) << label << ": capture must end on the origin";
      if (record) {
        EXPECT_TRUE(run.kept.empty()) << label;
        cross_stream_plans += plan.stream_count > 1 && !backend.reads.empty();
      } else {
        EXPECT_TRUE(backend.reads.empty()) << label << ": keep-alive needs no record_stream";
        EXPECT_FALSE(run.kept.empty()) << label << ": intermediates must be held until capture ends";
      }
      std::size_t waits = 0;
      for (const std::string& entry : backend.log) waits += entry.rfind("wait", 0) == 0;
      EXPECT_EQ(waits, plan.wait_count()) << label;
      // Each node is reported run, on its own stream, in launch order: where a capturing
      // backend checks that the capture survived it.
      std::vector<std::string> expected_runs;
      std::vector<std::string> runs;
      for (const CaptureAction& action : actions) {
        if (action.step == CaptureStep::kRun)
          expected_runs.push_back(fmt::format("ran {} {}", action.stream, action.node));
      }
      for (const std::string& entry : backend.log) {
        if (entry.rfind("ran", 0) == 0) runs.push_back(entry);
      }
      EXPECT_EQ(runs, expected_runs) << label;
    }
  }
  EXPECT_GT(cross_stream_plans, 0) << "no plan read across streams: the check proved nothing";
}

INSTANTIATE_TEST_SUITE_P(Models, ActionRunnerModels,
                         ::testing::Values(ModelCase{"inplace", "pt"}, ModelCase{"inplace", "pt2"},
                                           ModelCase{"branchy", "pt"}, ModelCase{"bert_base", "pt"},
                                           ModelCase{"t5_small", "pt2"}),
                         [](const auto& info) { return info.param.model + "_" + info.param.extension; });

TEST(ActionRunner, AFailingNodeIsNamedWithItsId) {
  OPARA_REQUIRE_MODEL("branchy");
  const Graph graph = load(testing::model_path("branchy", "pt"));
  const Plan plan = make_plan(graph, {});
  std::vector<std::shared_ptr<const NodeOp>> ops;
  for (const Node& node : graph.nodes()) ops.push_back(node.op);
  RecordingBackend backend;
  // A wrong input shape makes the first convolution or linear fail.
  const std::vector<c10::IValue> inputs{at::randn({1, 2, 3})};
  try {
    run_actions(graph, ops, capture_actions(graph, plan), inputs, backend, MemoryProtection::kRecordStream);
    FAIL() << "a wrong input shape ran";
  } catch (const NodeError& error) {
    EXPECT_THAT(error.what(), HasSubstr(graph.describe(error.node())));
    EXPECT_THAT(error.what(), HasSubstr("branchy_b1.pt"));
  }
}

TEST(ActionRunner, ANodeAfterWhichTheBackendFindsTheCaptureBrokenIsNamedAndNothingMoreRuns) {
  OPARA_REQUIRE_MODEL("branchy");
  const Graph graph = load(testing::model_path("branchy", "pt"));
  const auto reference = testing::format_reference("branchy", "pt");
  const Plan plan = make_plan(graph, {});
  const auto actions = capture_actions(graph, plan);
  std::vector<std::shared_ptr<const NodeOp>> ops;
  for (const Node& node : graph.nodes()) ops.push_back(node.op);
  NodeId culprit = kNoNode;
  for (const CaptureAction& action : actions) {
    if (action.step == CaptureStep::kRun && graph.node(action.node).kind == "aten::sigmoid") culprit = action.node;
  }
  ASSERT_NE(culprit, kNoNode);
  RecordingBackend backend;
  backend.break_capture_at = culprit;
  try {
    run_actions(graph, ops, actions, reference.inputs, backend, MemoryProtection::kRecordStream);
    FAIL() << "the broken capture went on";
  } catch (const NodeError& error) {
    EXPECT_EQ(error.node(), culprit);
  }
  EXPECT_EQ(backend.log.back(), fmt::format("ran {} {}", plan.stream_of[culprit], culprit)) << "nothing after it";
}

}  // namespace
}  // namespace opara
