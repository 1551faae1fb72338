// with_compiled_regions (include/opara/compiled_regions.h): a program's regions made one node
// each, planned on the streams of the plan that cut them, give the program's outputs and write its
// state; a description that does not fit the graph is refused naming the region. The regions here
// are "compiled" by a kernel of this test that runs their nodes (Inductor's stand-in).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/library.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "exec/node_op.h"
#include "model_files.h"
#include "opara/compiled_model.h"
#include "opara/compiled_regions.h"
#include "opara/error.h"
#include "opara/load.h"
#include "opara/plan.h"
#include "schedule/kernel_dag.h"

namespace opara {
namespace {

using ::testing::HasSubstr;

// A region as this test's kernel runs it: the nodes of the original graph, recomputing the
// kernel-free ones it reads, as the Python package recomputes views in a region.
struct TestRegion {
  const Graph* graph = nullptr;
  std::vector<NodeId> nodes;  // in id order: topological
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
};

std::map<std::int64_t, TestRegion>& test_regions() {
  static std::map<std::int64_t, TestRegion> regions;
  return regions;
}

std::vector<at::Tensor> run_test_region(std::int64_t key, const std::vector<at::Tensor>& inputs) {
  const TestRegion& region = test_regions().at(key);
  std::map<ValueId, c10::IValue> values;
  for (std::size_t i = 0; i < inputs.size(); ++i) values[region.inputs[i]] = inputs[i];
  for (NodeId id : region.nodes) {
    const Node& node = region.graph->node(id);
    std::vector<c10::IValue> stack;
    for (ValueId input : node.inputs) stack.push_back(values.at(input));
    node.op->run(stack);
    for (std::size_t k = 0; k < node.outputs.size(); ++k) values[node.outputs[k]] = stack[k];
  }
  std::vector<at::Tensor> outputs;
  for (ValueId output : region.outputs) outputs.push_back(values.at(output).toTensor().clone());
  return outputs;
}

TORCH_LIBRARY_FRAGMENT(opara, m) {
  m.def("region(int key, Tensor[] inputs) -> Tensor[]");
}
TORCH_LIBRARY_IMPL(opara, CompositeExplicitAutograd, m) {
  m.impl("region", TORCH_FN(run_test_region));
}

// Region `region` of `plan` as a TestRegion under `key`, and its entry of the description.
nlohmann::json described(const Graph& graph, const Plan& plan, int region, std::int64_t key) {
  const KernelDag dag = kernel_dag(graph);
  TestRegion test{&graph, {}, {}, {}};
  std::set<NodeId> inside;
  std::vector<NodeId> frontier;
  for (NodeId id = 0; id < static_cast<NodeId>(graph.size()); ++id) {
    if (plan.region_of[id] == region) frontier.push_back(id);
  }
  while (!frontier.empty()) {
    const NodeId id = frontier.back();
    frontier.pop_back();
    if (!inside.insert(id).second) continue;
    for (ValueId input : graph.node(id).inputs) {
      const NodeId producer = graph.value(input).producer;
      if (producer != kNoNode && !dag.is_kernel(producer)) frontier.push_back(producer);
    }
  }
  test.nodes.assign(inside.begin(), inside.end());
  nlohmann::json json{{"region", region}, {"op", "opara::region"}, {"key", key}};
  json["inputs"] = nlohmann::json::array();
  json["outputs"] = nlohmann::json::array();
  for (NodeId id : test.nodes) {
    for (ValueId input : graph.node(id).inputs) {
      const NodeId producer = graph.value(input).producer;
      if ((producer == kNoNode || !inside.count(producer)) &&
          std::find(test.inputs.begin(), test.inputs.end(), input) == test.inputs.end()) {
        test.inputs.push_back(input);
        json["inputs"].push_back({{"value", graph.value(input).name}});
      }
    }
  }
  for (NodeId id : test.nodes) {
    // A write of state lands where the state lives: no output (with_compiled_regions hands it on).
    const NodeId written_producer =
        graph.node(id).inputs.empty() ? kNoNode : graph.value(graph.node(id).inputs.front()).producer;
    const bool writes_state = graph.node(id).has(kWritesInput) && !inside.count(written_producer);
    if (plan.region_of[id] != region || writes_state) continue;
    for (ValueId output : graph.node(id).outputs) {
      const auto& users = graph.value(output).users;
      const bool outside = std::any_of(users.begin(), users.end(), [&](NodeId u) { return !inside.count(u); }) ||
                           std::find(graph.outputs().begin(), graph.outputs().end(), output) != graph.outputs().end();
      if (!outside) continue;
      test.outputs.push_back(output);
      json["outputs"].push_back(graph.value(output).name);
    }
  }
  test_regions()[key] = test;
  return json;
}

Plan regions_plan(const Graph& graph, StreamPolicy streams, double min_share) {
  PlanOptions options;
  options.streams = streams;
  options.regions = true;
  options.region_min_share = min_share;
  return make_plan(graph, options);
}

// Every region of `plan` compiled, as the description with_compiled_regions reads.
std::string every_region(const Graph& graph, const Plan& plan) {
  nlohmann::json regions = nlohmann::json::array();
  for (int region = 0; region < plan.region_count; ++region) regions.push_back(described(graph, plan, region, region));
  return nlohmann::json{{"plan", nlohmann::json::parse(to_json(graph, plan))}, {"regions", regions}}.dump();
}

int count_of(const Graph& graph, const std::string& kind) {
  return static_cast<int>(
      std::count_if(graph.nodes().begin(), graph.nodes().end(), [&](const Node& node) { return node.kind == kind; }));
}

std::vector<at::Tensor> kv_inputs(int position) {
  return {at::arange(8, at::kFloat).reshape({1, 2, 4}), at::tensor({position, position + 1}, at::kLong)};
}

// Two calls of each, the second at another position: what the first writes, the second reads.
void expect_the_same_calls(const CompiledModel& reference, const CompiledModel& compiled) {
  for (int position : {0, 3}) {
    const std::vector<at::Tensor> expected = reference.run(kv_inputs(position));
    const std::vector<at::Tensor> got = compiled.run(kv_inputs(position));
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::equal(got[i], expected[i])) << "call " << position;
  }
}

class CompiledRegions : public ::testing::TestWithParam<std::tuple<StreamPolicy, double>> {};

// KvCaches (tests/data/make_fixtures.py): two caches, each written in place by its own
// index_copy_, both read after. Two calls: what the first writes, the second reads.
TEST_P(CompiledRegions, GiveTheProgramsOutputsAndWriteItsState) {
  const auto [streams, min_share] = GetParam();
  const Graph graph = load(testing::fixture_path("kv_caches_functional.pt2"));
  const Plan plan = regions_plan(graph, streams, min_share);
  ASSERT_GT(plan.region_count, 0);
  const Graph regional = with_compiled_regions(graph, every_region(graph, plan), {});
  EXPECT_EQ(count_of(regional, "opara::region"), plan.region_count);
  EXPECT_EQ(count_of(regional, "aten::index_copy_"), 0) << "the writes of state are in the regions";
  EXPECT_EQ(count_of(regional, "opara::written_in_region"), 2) << "each written state handed on";
  CompiledModel reference = compile(graph, kv_inputs(0));
  CompiledModel compiled = compile(regional, kv_inputs(0));
  expect_the_same_calls(reference, compiled);
  const auto state = compiled.state();
  const auto expected_state = reference.state();
  ASSERT_EQ(state.size(), 2U);
  for (std::size_t i = 0; i < state.size(); ++i) {
    EXPECT_EQ(state[i].first, expected_state[i].first);
    EXPECT_TRUE(at::equal(state[i].second, expected_state[i].second)) << state[i].first;
  }
}

TEST(CompiledRegionsWrites, ARegionsWriteOfItsOwnIntermediateIsNoStateHandedOn) {
  // relu -> relu_ (writes relu's value, made inside the region) -> add: googlenet's ReLU(inplace).
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId relu = graph.add_node("aten::relu", {x}, {"Tensor"});
  const NodeId relu_ =
      graph.add_node("aten::relu_", {graph.node(relu).outputs[0]}, {"Tensor"}, kLaunchesKernel | kWritesInput);
  const NodeId add = graph.add_node("aten::add", {graph.node(relu_).outputs[0]}, {"Tensor"});
  graph.add_output(graph.node(add).outputs[0]);
  const Plan plan = regions_plan(graph, StreamPolicy::kSingle, 1e9);
  ASSERT_EQ(plan.region_count, 1);
  const nlohmann::json region{{"region", 0},
                              {"op", "opara::region"},
                              {"key", 0},
                              {"inputs", {{{"value", graph.value(x).name}}}},
                              {"outputs", {graph.value(graph.node(add).outputs[0]).name}}};
  const nlohmann::json description{{"plan", nlohmann::json::parse(to_json(graph, plan))}, {"regions", {region}}};
  const Graph regional = with_compiled_regions(graph, description.dump(), {});
  EXPECT_EQ(count_of(regional, "opara::region"), 1);
  EXPECT_EQ(count_of(regional, "opara::written_in_region"), 0) << "relu_ writes no state";
  EXPECT_EQ(regional.size(), 1U);
}

INSTANTIATE_TEST_SUITE_P(Plans, CompiledRegions,
                         ::testing::Values(std::make_tuple(StreamPolicy::kSingle, 1e9),
                                           std::make_tuple(StreamPolicy::kOpara, 0.0),
                                           std::make_tuple(StreamPolicy::kNimble, 0.0)));

// One plan: the graph of region nodes is planned on the streams that cut the regions.
TEST(CompiledRegionsPlan, KeepsTheStreamsThatCutTheRegions) {
  const Graph graph = load(testing::fixture_path("kv_caches_functional.pt2"));
  const Plan plan = regions_plan(graph, StreamPolicy::kOpara, 0.0);
  ASSERT_GT(plan.stream_count, 1) << "the two caches' writes are independent";
  const Graph regional = with_compiled_regions(graph, every_region(graph, plan), {});
  const Plan again = make_plan(regional, PlanOptions{StreamPolicy::kSingle});
  EXPECT_EQ(again.stream_count, plan.stream_count) << "a policy of one stream does not replan a planned graph";
  EXPECT_TRUE(validate(regional, again).empty());
}

// A runner of the caller's own (a package's AOTInductor region): the region's inputs in, its outputs out.
class TestRegionRunner final : public NodeOp {
 public:
  explicit TestRegionRunner(std::int64_t key) : key_(key) {}
  void run(std::vector<c10::IValue>& stack) const override {
    std::vector<at::Tensor> inputs;
    for (const c10::IValue& value : stack) inputs.push_back(value.toTensor());
    const std::vector<at::Tensor> outputs = run_test_region(key_, inputs);
    stack.assign(outputs.begin(), outputs.end());
  }
  [[nodiscard]] std::shared_ptr<const NodeOp> to(c10::Device /*device*/) const override {
    return std::make_shared<TestRegionRunner>(key_);
  }

 private:
  std::int64_t key_;
};

// The description with every region's op the caller's runner ("opara::aoti_region").
std::string with_runner_ops(const std::string& description) {
  nlohmann::json json = nlohmann::json::parse(description);
  for (nlohmann::json& region : json["regions"]) region["op"] = "opara::aoti_region";
  return json.dump();
}

TEST(RegionRunners, TheCallersRunnersGiveTheProgramsOutputsOnThePlansStreams) {
  const Graph graph = load(testing::fixture_path("kv_caches_functional.pt2"));
  const Plan plan = regions_plan(graph, StreamPolicy::kOpara, 0.0);
  const std::string description = with_runner_ops(every_region(graph, plan));
  RegionOps runners;
  for (int region = 0; region < plan.region_count; ++region)
    runners[region] = std::make_shared<TestRegionRunner>(region);
  const Graph regional = with_region_runners(graph, description, runners);
  EXPECT_EQ(count_of(regional, "opara::aoti_region"), plan.region_count);
  EXPECT_EQ(make_plan(regional, PlanOptions{StreamPolicy::kSingle}).stream_count, plan.stream_count);
  CompiledModel reference = compile(graph, kv_inputs(0));
  CompiledModel compiled = compile(regional, kv_inputs(0));
  expect_the_same_calls(reference, compiled);
  runners.erase(0);
  try {
    (void)with_region_runners(graph, description, runners);
    ADD_FAILURE() << "a region without a runner was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("compiled region 0: no runner was given for its key 0"));
    EXPECT_THAT(error.what(), HasSubstr(graph.source_path));
  }
}

std::string refusal(const Graph& graph, const std::string& description) {
  try {
    (void)with_compiled_regions(graph, description, {});
  } catch (const Error& error) {
    return error.what();
  }
  return "accepted";
}

TEST(CompiledRegionsErrors, ADescriptionThatDoesNotFitIsRefusedNamingTheRegion) {
  const Graph graph = load(testing::fixture_path("kv_caches_functional.pt2"));
  const Plan plan = regions_plan(graph, StreamPolicy::kSingle, 1e9);
  nlohmann::json good = nlohmann::json::parse(every_region(graph, plan));
  const std::string source = graph.source_path;
  EXPECT_THAT(refusal(graph, "{"), HasSubstr("the compiled regions' description is not valid"));

  nlohmann::json twice = good;
  twice["regions"].push_back(good["regions"][0]);
  EXPECT_THAT(refusal(graph, twice.dump()), HasSubstr("compiled region 0: not one of the plan's"));

  nlohmann::json unknown = good;
  unknown["regions"][0]["inputs"][0] = {{"value", "no_such_value"}};
  EXPECT_THAT(refusal(graph, unknown.dump()),
              HasSubstr("compiled region 0: the program has no value named no_such_value"));

  nlohmann::json missing = good;
  missing["regions"][0]["outputs"] = nlohmann::json::array();
  EXPECT_THAT(refusal(graph, missing.dump()), HasSubstr("is read outside it but is not among its outputs"));

  // A write of state lands where the state lives: the region gives no copy of it.
  const auto write = std::find_if(graph.nodes().begin(), graph.nodes().end(),
                                  [](const Node& node) { return node.kind == "aten::index_copy_"; });
  ASSERT_NE(write, graph.nodes().end());
  nlohmann::json gives_state = good;
  gives_state["regions"][0]["outputs"].push_back(graph.value(write->outputs[0]).name);
  EXPECT_THAT(refusal(graph, gives_state.dump()), HasSubstr("the state it writes in place"));

  nlohmann::json other_op = good;
  other_op["regions"][0]["op"] = "aten::relu";
  EXPECT_THAT(refusal(graph, other_op.dump()), HasSubstr("unknown op aten::relu"));

  // The extension defines opara::native_region; this test binary does not load it.
  nlohmann::json unregistered = good;
  unregistered["regions"][0]["op"] = "opara::native_region";
  EXPECT_THAT(refusal(graph, unregistered.dump()), HasSubstr("opara::native_region is not registered"));

  nlohmann::json other_plan = good;
  other_plan["plan"]["region_of"].push_back(0);
  EXPECT_THAT(refusal(graph, other_plan.dump()), HasSubstr(source));
}

}  // namespace
}  // namespace opara
