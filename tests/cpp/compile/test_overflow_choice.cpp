// choose_placement: what compile() runs on the CPU for each OverflowOptions::policy. none keeps
// everything on the GPU but what cannot be captured; manual takes ids, kinds or a JSON file and
// names what it does not know; comm_sd reads the times of a full profile, gives Comm+SD's placement
// with its predictions, and says how to get a profile when it has none or one without times.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "compile/overflow_choice.h"
#include "graph_builders.h"
#include "model_files.h"
#include "opara/error.h"
#include "opara/profile.h"
#include "overflow/placements.h"

namespace opara {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// The fixture profile's graph, named as a model file would be.
Graph five_nodes() {
  Graph graph = testing::profile_fixture_graph();
  graph.source_path = "five_nodes.pt";
  return graph;
}

// x -> a -> nonzero (cannot be captured) -> b
Graph with_nonzero() {
  Graph graph;
  graph.source_path = "nonzero.pt";
  const ValueId x = graph.add_input("x");
  const NodeId a = graph.add_node("aten::relu", {x}, {"Tensor"});
  const NodeId h =
      graph.add_node("aten::nonzero", {graph.node(a).outputs[0]}, {"Tensor"}, kLaunchesKernel | kNotCapturable);
  graph.add_output(graph.node(graph.add_node("aten::sum", {graph.node(h).outputs[0]}, {"Tensor"})).outputs[0]);
  return graph;
}

Options policy(OverflowPolicy overflow) {
  Options options;
  options.overflow.policy = overflow;
  return options;
}

// As compile() asks: the overflow options and the profile from the cost options.
OverflowChoice choose(const Graph& graph, const Options& options, int gpu_streams) {
  return choose_placement(graph, {}, options.overflow, options.costs.profile, gpu_streams);
}

TEST(ChoosePlacement, NoneKeepsAllOnTheGpuButWhatCannotBeCaptured) {
  const OverflowChoice choice = choose(with_nonzero(), policy(OverflowPolicy::kNone), 1);
  EXPECT_THAT(choice.placement, ElementsAre(Placement::kGpu, Placement::kHost, Placement::kGpu));
  EXPECT_FALSE(choice.predicted_us.has_value());
}

TEST(ChoosePlacement, ManualTakesIdsKindsAndAJsonFile) {
  Options options = policy(OverflowPolicy::kManual);
  options.overflow.cpu_nodes = {"aten::relu", "3"};
  const std::vector<Placement> by_name = choose(five_nodes(), options, 1).placement;
  EXPECT_THAT(by_name,
              ElementsAre(Placement::kGpu, Placement::kGpu, Placement::kCpu, Placement::kCpu, Placement::kGpu));
  const std::string file = testing::scratch_path("overflow_choice_cpu.json");
  std::ofstream(file) << R"({"cpu": [3, "aten::relu"]})";
  options.overflow.cpu_nodes = {file};
  EXPECT_EQ(choose(five_nodes(), options, 1).placement, by_name);
}

TEST(ChoosePlacement, ManualWithoutNamesOrWithUnknownOnesSaysWhatToDo) {
  Options options = policy(OverflowPolicy::kManual);
  EXPECT_THAT([&] { choose(five_nodes(), options, 1); },
              ThrowsMessage<Error>(AllOf(HasSubstr("five_nodes.pt"), HasSubstr("names no node"),
                                         HasSubstr("Options::overflow.cpu_nodes"))));
  options.overflow.cpu_nodes = {"aten::rleu"};
  EXPECT_THAT([&] { choose(five_nodes(), options, 1); }, ThrowsMessage<Error>(HasSubstr("aten::rleu")));
}

TEST(ChoosePlacement, CommSdWithoutTimesSaysHowToRecordThem) {
  Options options = policy(OverflowPolicy::kCommSd);
  EXPECT_THAT([&] { choose(five_nodes(), options, 1); },
              ThrowsMessage<Error>(AllOf(HasSubstr("five_nodes.pt"), HasSubstr("Options::costs.profile"),
                                         HasSubstr("opara-bench profile"))));
  options.costs.profile = testing::scratch_path("no_such_profile.json");
  EXPECT_THAT([&] { choose(five_nodes(), options, 1); },
              ThrowsMessage<Error>(AllOf(HasSubstr("no_such_profile.json"), HasSubstr("cannot read"))));
  options.costs.profile = testing::scratch_path("classes_only.json");
  std::ofstream(options.costs.profile) << R"({"nodes": [{"id": 0, "kind": "aten::conv2d", "class": "compute"}]})";
  EXPECT_THAT([&] { choose(five_nodes(), options, 1); },
              ThrowsMessage<Error>(AllOf(HasSubstr("classes_only.json"), HasSubstr("full profile"))));
}

// The fixture's relu and add take a few microseconds on either side, its first convolution 5 us on
// the GPU and 90 on the CPU: the choice is Comm+SD's placement on the profile's times, with its
// predictions.
TEST(ChoosePlacement, CommSdIsTheAlgorithmOnTheProfilesTimes) {
  const Graph graph = five_nodes();
  Options options = policy(OverflowPolicy::kCommSd);
  options.costs.profile = testing::fixture_path("profile_five_nodes.json");
  options.overflow.alpha_us = 30;
  const OverflowChoice choice = choose(graph, options, 3);
  CommSdOptions comm_sd;
  comm_sd.gpu_streams = 3;
  const PlacementReport expected =
      comm_sd_placement(graph, placement_costs(graph, load_profile(options.costs.profile), {}, 30), comm_sd);
  EXPECT_EQ(choice.placement, expected.placement);
  ASSERT_TRUE(choice.predicted_us && choice.predicted_none_us);
  EXPECT_DOUBLE_EQ(*choice.predicted_us, expected.chosen_us);
  EXPECT_DOUBLE_EQ(*choice.predicted_none_us, expected.none_us);
  EXPECT_LE(*choice.predicted_us, *choice.predicted_none_us);
  EXPECT_EQ(choice.placement[0], Placement::kGpu) << "a convolution 18x slower on the CPU stays";
}

}  // namespace
}  // namespace opara
