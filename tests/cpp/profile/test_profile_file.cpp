// Profiles as files: the committed fixture parses, its demands are what its kernels give, it
// survives a round trip, it drives Alg. 2, and it is refused for another model, device or input.
#include <c10/util/Exception.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "graph_builders.h"
#include "model_files.h"
#include "opara/compiled_model.h"
#include "opara/error.h"
#include "opara/load.h"
#include "opara/model_profiler.h"
#include "opara/plan.h"
#include "opara/profile.h"
#include "profile/kernel_demand.h"
#include "profile_fixtures.h"
#include "schedule/stages.h"

namespace opara {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kFixtureHash[] = "fnv1a64:00000000c0ffee00";

Graph five_nodes() {
  return testing::profile_fixture_graph();
}

ProfileMatch fixture_match() {
  ProfileMatch match;
  match.model_hash = kFixtureHash;
  match.device = testing::h100();
  match.inputs = std::vector<ProfileInput>{{{1, 3, 8, 8}, "Float"}};
  return match;
}

std::string fixture() {
  return testing::fixture_path("profile_five_nodes.json");
}

std::string write(const std::string& name, const std::string& text) {
  const std::string path = testing::scratch_path(name);
  std::ofstream(path) << text;
  return path;
}

// Collects TORCH_WARN messages while alive.
class WarningCollector : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
  std::vector<std::string> messages;
};

TEST(ProfileFile, TheFixtureParsesAndItsDemandsAreWhatItsKernelsGive) {
  const Profile profile = load_profile(fixture());
  EXPECT_EQ(profile.device, testing::h100());
  EXPECT_EQ(profile.model_hash, kFixtureHash);
  EXPECT_EQ(profile.demand_source, "cupti");
  ASSERT_EQ(profile.nodes.size(), 5u);
  EXPECT_EQ(profile.nodes[2].kernels.size(), 2u);
  EXPECT_EQ(profile.nodes[4].copies.size(), 1u);
  EXPECT_FALSE(profile.nodes[2].flops.has_value());
  EXPECT_EQ(profile.nodes[0].flops, 1e6);
  for (const NodeProfile& node : profile.nodes) {
    const ResourceDemand recomputed = node_demand(node.kernels, profile.device);
    EXPECT_NEAR(node.demand.demand, recomputed.demand, 1e-12) << "node " << node.id;
    EXPECT_NEAR(node.demand.thread_fraction, recomputed.thread_fraction, 1e-12) << "node " << node.id;
    EXPECT_NEAR(node.demand.register_fraction, recomputed.register_fraction, 1e-12) << "node " << node.id;
    EXPECT_NEAR(node.demand.smem_fraction, recomputed.smem_fraction, 1e-12) << "node " << node.id;
    std::uint64_t device_ns = 0;
    for (const KernelRecord& kernel : node.kernels) device_ns += kernel.duration_ns();
    for (const CopyRecord& copy : node.copies) device_ns += copy.duration_ns();
    EXPECT_EQ(node.gpu_ns, static_cast<double>(device_ns)) << "node " << node.id;
  }
}

TEST(ProfileFile, SavesAndLoadsEveryField) {
  Profile profile = load_profile(fixture());
  profile.notes = {"a note"};
  profile.unattributed_kernels = {testing::kernel("stray", 1, 32, 8)};
  profile.unattributed_copies = {CopyRecord{"memcpy DtoH", 4, 1, 2, 3, 4, 5}};
  profile.silent_nodes = {3};
  profile.nodes[1].kernels[0].local_mem_per_thread = 48;
  profile.demand_source = "static estimate";
  const std::string path = testing::scratch_path("round_trip.profile.json");
  save_profile(profile, path);
  const Profile loaded = load_profile(path);
  EXPECT_EQ(to_json(loaded), to_json(profile));
  EXPECT_EQ(loaded.nodes[1].kernels[0], profile.nodes[1].kernels[0]);
  EXPECT_EQ(loaded.unattributed_copies[0], profile.unattributed_copies[0]);
  EXPECT_EQ(loaded.silent_nodes, profile.silent_nodes);
}

TEST(ProfileFile, MalformedProfilesNameTheFileAndTheField) {
  EXPECT_THROW(load_profile(testing::scratch_path("no_such.profile.json")), Error);
  std::string text = to_json(load_profile(fixture()));
  const std::string bad_class = write("bad_class.json", [&] {
    std::string copy = text;
    copy.replace(copy.find("\"compute\""), 9, "\"fast\"");
    return copy;
  }());
  try {
    load_profile(bad_class);
    FAIL() << "a class that is neither compute nor memory was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr(bad_class));
    EXPECT_THAT(error.what(), HasSubstr("'fast'"));
  }
  const std::string newer = write("newer.json", [&] {
    std::string copy = text;
    copy.replace(copy.find("\"version\": 1"), 12, "\"version\": 99");
    return copy;
  }());
  EXPECT_THROW(load_profile(newer), Error);
  EXPECT_FALSE(is_full_profile(R"({"nodes": []})"));
  EXPECT_FALSE(is_full_profile("{not json"));
  EXPECT_TRUE(is_full_profile(text));
}

TEST(ProfileFile, FiguresThatCannotBeMeasuredAreRefusedByName) {
  const nlohmann::json good = nlohmann::json::parse(to_json(load_profile(fixture())));
  struct Damage {
    std::string label;
    std::function<void(nlohmann::json&)> apply;
    std::string message;
  };
  const std::vector<Damage> damages = {
      {"negative time", [](nlohmann::json& p) { p["nodes"][1]["gpu_ns"] = -5.0; }, "node 1: gpu_ns is -5"},
      {"negative bytes", [](nlohmann::json& p) { p["nodes"][0]["bytes_in"] = -1; }, "node 0: bytes_in is -1"},
      {"demand past 1", [](nlohmann::json& p) { p["nodes"][2]["demand"] = 3.0; }, "node 2: demand is 3"},
      {"no SMs", [](nlohmann::json& p) { p["device"]["sm_count"] = 0; }, "device: sm_count is 0"},
      {"negative host time", [](nlohmann::json& p) { p["nodes"][0]["cpu_ns"] = -0.5; }, "node 0: cpu_ns is -0.5"},
      {"a silent node past the end", [](nlohmann::json& p) { p["silent_nodes"] = {999999}; },
       "silent_nodes names node 999999"},
      {"version 0", [](nlohmann::json& p) { p["version"] = 0; }, "version 0 is not a profile format version"},
  };
  for (const Damage& damage : damages) {
    nlohmann::json damaged = good;
    damage.apply(damaged);
    const std::string path = write("damaged.json", damaged.dump());
    try {
      load_profile(path);
      ADD_FAILURE() << damage.label << " was accepted";
    } catch (const Error& error) {
      EXPECT_THAT(error.what(), AllOf(HasSubstr(path), HasSubstr(damage.message))) << damage.label;
    }
  }
}

TEST(ProfileFile, DrivesTheLaunchOrder) {
  const Graph graph = five_nodes();
  const std::vector<NodeCost> costs = costs_from_profile(graph, fixture(), fixture_match());
  // Ready: memory 2 (0.40625) and 3 (0.125); compute 0 (1.0) and 1 (0.25). Alg. 2 takes the
  // smallest of each class in turn, memory first: 3, 1, 2, 0; then the cat.
  EXPECT_EQ(launch_order(graph, OrderPolicy::kOpara, costs), (std::vector<NodeId>{3, 1, 2, 0, 4}));
  EXPECT_EQ(launch_order(graph, OrderPolicy::kTopological, costs), (std::vector<NodeId>{0, 1, 2, 3, 4}));
  const Plan plan = make_plan(graph, PlanOptions{StreamPolicy::kOpara, OrderPolicy::kOpara, 0}, costs);
  EXPECT_EQ(plan.launch_order, (std::vector<NodeId>{3, 1, 2, 0, 4}));
  EXPECT_TRUE(validate(graph, plan).empty());
}

TEST(ProfileFile, TheMinimalFormStillWorks) {
  const Graph graph = five_nodes();
  const std::string path = write("minimal.json", R"({"nodes": [
      {"id": 0, "kind": "aten::conv2d", "class": "compute", "demand": 3},
      {"id": 1, "kind": "aten::conv2d", "class": "compute", "demand": 2},
      {"id": 2, "kind": "aten::relu", "class": "memory", "demand": 1},
      {"id": 3, "kind": "aten::add", "class": "memory", "demand": 2},
      {"id": 4, "kind": "aten::cat", "class": "memory", "demand": 1}]})");
  // Nothing to check in the minimal form: whatever is expected, it is read.
  const std::vector<NodeCost> costs = costs_from_profile(graph, path, fixture_match());
  EXPECT_EQ(launch_order(graph, OrderPolicy::kOpara, costs), (std::vector<NodeId>{2, 1, 3, 0, 4}));
}

TEST(ProfileFile, RefusesAProfileOfAnotherModelDeviceOrInputSaying) {
  const Graph graph = five_nodes();
  ProfileMatch other_model = fixture_match();
  other_model.model_hash = "fnv1a64:1111111111111111";
  ProfileMatch other_device = fixture_match();
  other_device.device->name = "NVIDIA H200";
  other_device.device->sm_count = 132;
  ProfileMatch other_inputs = fixture_match();
  other_inputs.inputs = std::vector<ProfileInput>{{{8, 3, 8, 8}, "Float"}};
  const std::vector<std::pair<ProfileMatch, std::string>> cases = {
      {other_model, "model: the profile is of a model file with hash fnv1a64:00000000c0ffee00"},
      {other_device, "device: the profile was made on NVIDIA H100 80GB HBM3"},
      {other_inputs, "input shapes: the profile was made for Float[1x3x8x8], the inputs are Float[8x3x8x8]"},
  };
  for (const auto& [match, expected] : cases) {
    try {
      costs_from_profile(graph, fixture(), match);
      ADD_FAILURE() << "accepted although: " << expected;
    } catch (const Error& error) {
      EXPECT_THAT(error.what(), HasSubstr(expected));
      EXPECT_THAT(error.what(), HasSubstr(fixture()));
      EXPECT_THAT(error.what(), HasSubstr("--allow-profile-mismatch"));
    }
  }
  // Only what differs is named.
  const std::vector<std::string> differences = profile_mismatches(load_profile(fixture()), other_inputs);
  ASSERT_EQ(differences.size(), 1u);
  EXPECT_THAT(differences[0], Not(HasSubstr("device")));
  // Unset fields are not checked.
  EXPECT_NO_THROW(costs_from_profile(graph, fixture(), ProfileMatch{}));
}

TEST(ProfileFile, AMismatchAllowedIsUsedWithAWarning) {
  const Graph graph = five_nodes();
  ProfileMatch match = fixture_match();
  match.model_hash = "fnv1a64:1111111111111111";
  match.allow_mismatch = true;
  std::vector<std::string> warnings;
  match.warn = [&warnings](const std::string& warning) { warnings.push_back(warning); };
  const std::vector<NodeCost> costs = costs_from_profile(graph, fixture(), match);
  EXPECT_EQ(launch_order(graph, OrderPolicy::kOpara, costs), (std::vector<NodeId>{3, 1, 2, 0, 4}));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("model: the profile is of a model file"));
}

TEST(ProfileFile, AMismatchAllowedThroughModelCostsIsATorchWarning) {
  // model_costs (what compile() and opara.plan use) hands the warning to TORCH_WARN, which Python
  // shows as a UserWarning. The fixture is a profile of another model file: allowed, it warns,
  // and then its node kinds are refused.
  if (!testing::model_exported("branchy")) GTEST_SKIP() << "opara-test-skip: branchy is not exported";
  const Graph graph = load(testing::model_path("branchy", "pt"));
  WarningCollector warnings;
  const c10::WarningUtils::WarningHandlerGuard guard(&warnings);
  CostOptions options;
  options.profile = fixture();
  options.allow_profile_mismatch = true;
  EXPECT_THROW(model_costs(graph, {}, options), Error);
  ASSERT_EQ(warnings.messages.size(), 1u);
  EXPECT_THAT(warnings.messages[0], HasSubstr("model: the profile is of a model file"));
}

TEST(ProfileFile, TheNodesMustStillBeThisGraphs) {
  // A full profile that passes the header checks is still refused for a graph of other kinds.
  Graph other;
  const ValueId x = other.add_input("x");
  for (int i = 0; i < 5; ++i) other.add_node("aten::linear", {x}, {"Tensor"});
  try {
    costs_from_profile(other, fixture(), fixture_match());
    FAIL() << "a profile of other node kinds was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("node 0 is aten::conv2d in the profile"));
  }
}

// A full profile of an exported model, as the profiler would write it for `inputs`.
Profile profile_for(const std::string& path, const Graph& graph, const std::vector<at::Tensor>& inputs) {
  Profile profile = load_profile(fixture());
  profile.model_path = path;
  profile.model_hash = hash_model_file(path);
  profile.inputs.clear();
  for (const at::Tensor& input : inputs) {
    profile.inputs.push_back(ProfileInput{input.sizes().vec(), c10::toString(input.scalar_type())});
  }
  profile.nodes.clear();
  for (const Node& node : graph.nodes()) {
    NodeProfile& entry = profile.nodes.emplace_back();
    entry.id = node.id;
    entry.kind = node.kind;
    // A share of the GPU, as CUPTI's are: falling with the node id.
    entry.demand.demand = static_cast<double>(graph.size() - static_cast<std::size_t>(node.id)) / graph.size();
  }
  return profile;
}

TEST(ProfileFile, CompileChecksTheProfileAgainstTheModelFileAndTheInputs) {
  OPARA_REQUIRE_MODEL("branchy");
  const std::string path = testing::model_path("branchy", "pt");
  const Graph graph = load(path);
  const std::vector<at::Tensor> inputs = testing::format_reference("branchy", "pt").tensors;
  const std::string saved = testing::scratch_path("branchy_cpu.profile.json");
  save_profile(profile_for(path, graph, inputs), saved);
  Options options;
  options.device = c10::Device(c10::kCPU);
  options.costs.profile = saved;
  EXPECT_EQ(compile(path, inputs, options).plan().cost_source, "profile");
  try {
    compile(path, {at::cat({inputs[0], inputs[0]})}, options);
    FAIL() << "a batch-1 profile was used for batch 2";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("input shapes: the profile was made for Float[1x3x32x32]"));
  }
  // A profile of another model file (here: its hash) is refused, or used with a warning.
  Profile other = profile_for(path, graph, inputs);
  other.model_hash = "fnv1a64:0000000000000000";
  save_profile(other, saved);
  try {
    compile(path, inputs, options);
    FAIL() << "a profile of another file was used";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("model: the profile is of a model file with hash fnv1a64:0000000000000000"));
  }
  options.costs.allow_profile_mismatch = true;
  WarningCollector warnings;
  const c10::WarningUtils::WarningHandlerGuard guard(&warnings);
  EXPECT_EQ(compile(path, inputs, options).plan().cost_source, "profile");
  EXPECT_EQ(warnings.messages.size(), 1u);
}

// A model exported again has another file hash (a TorchScript file's bytes depend on the process
// that wrote it) and the same structure: a profile recording the structure still fits it.
TEST(ProfileFile, AProfileFitsAModelFileOfAnotherHashWithTheSameStructure) {
  const Graph graph = five_nodes();
  Profile profile = load_profile(fixture());
  ProfileMatch exported_again = fixture_match();
  exported_again.model_hash = "fnv1a64:1111111111111111";
  exported_again.model_structure = hash_graph_structure(graph);
  EXPECT_THAT(profile_mismatches(profile, exported_again), ::testing::ElementsAre(HasSubstr("model:")))
      << "a profile that records no structure still needs the file's hash";
  profile.model_structure = hash_graph_structure(graph);
  EXPECT_TRUE(profile_mismatches(profile, exported_again).empty());
  EXPECT_EQ(profile_from_json(to_json(profile)).model_structure, profile.model_structure);
  Graph wider = five_nodes();
  wider.set_source(0, "", "Tensor[128, 3, 3, 3]");  // another weight's shape: another model
  exported_again.model_structure = hash_graph_structure(wider);
  EXPECT_THAT(profile_mismatches(profile, exported_again), ::testing::ElementsAre(HasSubstr("model:")));
}

TEST(ModelHash, TheStructureIsTheKindsEdgesAndConstants) {
  const std::string structure = hash_graph_structure(five_nodes());
  EXPECT_EQ(hash_graph_structure(five_nodes()), structure);
  Graph renamed = five_nodes();
  renamed.set_source(1, "another_file.py:3", "");  // where a node came from is no part of it
  EXPECT_EQ(hash_graph_structure(renamed), structure);
  Graph constant = five_nodes();
  constant.set_source(2, "", "alpha=2");
  EXPECT_NE(hash_graph_structure(constant), structure);
  Graph rewired = testing::graph_from_edges(5, {{0, 4}, {1, 4}, {2, 4}, {3, 4}});
  EXPECT_NE(hash_graph_structure(rewired), structure);
}

TEST(ModelHash, IsFnv1aOfTheBytes) {
  // FNV-1a 64 of "a" is af63dc4c8601ec8c (the published test vector).
  EXPECT_EQ(hash_model_file(write("a.bin", "a")), "fnv1a64:af63dc4c8601ec8c");
  EXPECT_EQ(hash_model_file(write("empty.bin", "")), "fnv1a64:cbf29ce484222325");
  EXPECT_THROW(hash_model_file(testing::scratch_path("no_such_model.pt")), Error);
}

}  // namespace
}  // namespace opara
