// Manual placement: nodes named by id or kind, from a list or a JSON file; uncapturable nodes stay
// on the host whatever the list says; every unknown name is reported at once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "graph_builders.h"
#include "opara/error.h"
#include "opara/placement.h"
#include "overflow/placements.h"

namespace opara {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr Placement G = Placement::kGpu;
constexpr Placement C = Placement::kCpu;
constexpr Placement H = Placement::kHost;

// x -> conv -> nms (not capturable) -> relu; x -> relu2.
Graph detection_like() {
  Graph graph;
  graph.source_path = "detect.pt";
  const ValueId x = graph.add_input("x");
  const NodeId conv = graph.add_node("aten::conv2d", {x}, {"Tensor"});
  const NodeId nms =
      graph.add_node("torchvision::nms", {graph.node(conv).outputs[0]}, {"Tensor"}, kLaunchesKernel | kNotCapturable);
  graph.add_node("aten::relu", {graph.node(nms).outputs[0]}, {"Tensor"});
  graph.add_node("aten::relu", {x}, {"Tensor"});
  return graph;
}

std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(ManualPlacement, NamesByIdAndKind) {
  const Graph graph = detection_like();
  EXPECT_THAT(manual_placement(graph, {}), ElementsAre(G, H, G, G));
  EXPECT_THAT(manual_placement(graph, {"0"}), ElementsAre(C, H, G, G));
  EXPECT_THAT(manual_placement(graph, {"aten::relu"}), ElementsAre(G, H, C, C));
  EXPECT_THAT(manual_placement(graph, {"1", "3"}), ElementsAre(G, H, G, C));  // nms stays on the host
}

TEST(ManualPlacement, UnknownNamesAreErrorsNamingThemAll) {
  const Graph graph = detection_like();
  const std::string message = message_of([&] { manual_placement(graph, {"aten::relu", "aten::rleu", "4"}); });
  EXPECT_THAT(message, AllOf(HasSubstr("detect.pt"), HasSubstr("aten::rleu, 4"), HasSubstr("0 to 3"),
                             HasSubstr("opara-bench info")));
}

TEST(ManualPlacement, ReadsAJsonFile) {
  const Graph graph = detection_like();
  const auto dir = std::filesystem::temp_directory_path();
  const auto write = [&](const char* name, const char* text) {
    const std::string path = (dir / name).string();
    std::ofstream(path) << text;
    return path;
  };
  EXPECT_THAT(manual_placement_file(graph, write("opara_cpu_ok.json", R"({"cpu": [0, "aten::relu"]})")),
              ElementsAre(C, H, C, C));
  const std::string unknown = write("opara_cpu_unknown.json", R"({"cpu": ["aten::nope"]})");
  EXPECT_THAT(message_of([&] { manual_placement_file(graph, unknown); }),
              AllOf(HasSubstr(unknown), HasSubstr("aten::nope")));
  const std::string wrong = write("opara_cpu_wrong.json", R"({"gpu": [1]})");
  EXPECT_THAT(message_of([&] { manual_placement_file(graph, wrong); }), HasSubstr(R"({"cpu": [ids or kinds]})"));
  const std::string bad = write("opara_cpu_bad.json", R"({"cpu": [1.5]})");
  EXPECT_THAT(message_of([&] { manual_placement_file(graph, bad); }), HasSubstr("1.5"));
  EXPECT_THAT(message_of([&] { manual_placement_file(graph, (dir / "opara_no_such.json").string()); }),
              HasSubstr("cannot read"));
}

TEST(ManualPlacement, PolicyNames) {
  EXPECT_EQ(parse_overflow_policy("comm_sd"), OverflowPolicy::kCommSd);
  EXPECT_EQ(to_string(parse_overflow_policy("manual")), "manual");
  EXPECT_THAT(message_of([] { parse_overflow_policy("sd"); }), HasSubstr("none, comm_sd or manual"));
}

}  // namespace
}  // namespace opara
