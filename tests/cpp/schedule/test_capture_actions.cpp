// The CUDA graph capturer's list of actions, checked without a GPU: every side stream forked
// before use and joined at the end, every wait after its record, every node run once after its
// producers, on the plan's stream.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "exported_models.h"
#include "graph_builders.h"
#include "model_files.h"
#include "opara/load.h"
#include "opara/plan.h"
#include "plan_fixtures.h"
#include "random_models.h"
#include "schedule/capture_actions.h"

namespace opara {
namespace {

using ::testing::Contains;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr CaptureStep kFork = CaptureStep::kFork;
constexpr CaptureStep kWait = CaptureStep::kWait;
constexpr CaptureStep kRun = CaptureStep::kRun;
constexpr CaptureStep kRecord = CaptureStep::kRecord;
constexpr CaptureStep kJoin = CaptureStep::kJoin;

// a(0) -> v(2, a view) -> d(4); a, b(1) -> c(3); b -> d; c, d -> e(5); v is also an output.
Graph diamond_with_view() {
  return testing::graph_from_edges(6, {{0, 2}, {0, 3}, {1, 3}, {2, 4}, {1, 4}, {3, 5}, {4, 5}}, {2});
}

Plan diamond_plan() {
  Plan plan;
  plan.stream_count = 3;
  plan.stream_of = {0, 1, kNoStream, 0, 1, 2};
  plan.launch_order = {0, 1, 2, 3, 4, 5};
  plan.waits = {{}, {}, {}, {1}, {0}, {3, 4}};
  plan.records = {1, 1, 0, 1, 1, 0};
  return plan;
}

std::string describe(const std::vector<CaptureAction>& actions) {
  std::string text;
  for (const CaptureAction& action : actions) text += to_string(action) + "; ";
  return text;
}

TEST(CaptureActions, HandWrittenPlanGivesTheExpectedSequence) {
  const Graph graph = diamond_with_view();
  const Plan plan = diamond_plan();
  ASSERT_THAT(validate(graph, plan), IsEmpty());
  const std::vector<CaptureAction> expected{
      {kFork, 0},    {kRun, 0, 0},    {kRecord, 0, 0}, {kFork, 1},    {kRun, 1, 1},  {kRecord, 1, 1},
      {kWait, 0, 1}, {kRun, 0, 3},    {kRecord, 0, 3}, {kWait, 1, 0}, {kRun, 1, 2},  // the view, on its reader's stream
      {kRun, 1, 4},  {kRecord, 1, 4}, {kFork, 2},      {kWait, 2, 3}, {kWait, 2, 4}, {kRun, 2, 5},
      {kJoin, 0},    {kJoin, 1},      {kJoin, 2},
  };
  const auto actions = capture_actions(graph, plan);
  EXPECT_THAT(actions, ElementsAreArray(expected)) << describe(actions);
  EXPECT_THAT(check_capture_actions(graph, plan, actions), IsEmpty());
}

TEST(CaptureActions, ViewsNoKernelReadsRunOnTheOriginAfterTheJoins) {
  // 0 -> 1 (view, an output nobody else reads) ; 0 -> 2
  const Graph graph = testing::graph_from_edges(3, {{0, 1}, {0, 2}}, {1});
  const Plan plan = make_plan(graph, {StreamPolicy::kOpara, OrderPolicy::kTopological});
  const auto actions = capture_actions(graph, plan);
  ASSERT_FALSE(actions.empty());
  EXPECT_EQ(actions.back(), (CaptureAction{kRun, kOriginStream, 1})) << describe(actions);
  EXPECT_THAT(check_capture_actions(graph, plan, actions), IsEmpty());
}

TEST(CaptureActions, AGraphWithoutKernelsForksNothing) {
  const Graph graph = testing::graph_from_edges(3, {{0, 1}, {1, 2}}, {0, 1, 2});
  const Plan plan = make_plan(graph, {});
  const auto actions = capture_actions(graph, plan);
  EXPECT_THAT(actions, ElementsAreArray(std::vector<CaptureAction>{
                           {kRun, kOriginStream, 0}, {kRun, kOriginStream, 1}, {kRun, kOriginStream, 2}}));
  EXPECT_THAT(check_capture_actions(graph, plan, actions), IsEmpty());
}

// Forks and joins: one of each per stream that has a node.
void expect_well_formed(const Graph& graph, const Plan& plan, const std::string& context) {
  const auto actions = capture_actions(graph, plan);
  ASSERT_THAT(check_capture_actions(graph, plan, actions), IsEmpty()) << context << ": " << describe(actions);
  std::set<int> used;
  for (NodeId node = 0; node < static_cast<NodeId>(graph.size()); ++node) {
    if (plan.stream_of[node] != kNoStream) used.insert(plan.stream_of[node]);
  }
  const auto count = [&](CaptureStep step) {
    return std::count_if(actions.begin(), actions.end(), [&](const CaptureAction& a) { return a.step == step; });
  };
  ASSERT_EQ(count(kFork), static_cast<long>(used.size())) << context;
  ASSERT_EQ(count(kJoin), static_cast<long>(used.size())) << context;
  ASSERT_EQ(count(kWait), static_cast<long>(plan.wait_count())) << context;
  ASSERT_EQ(count(kRecord), static_cast<long>(plan.event_count())) << context;
  ASSERT_EQ(count(kRun), static_cast<long>(graph.size())) << context;
}

TEST(CaptureActions, WellFormedForEveryPolicyOnRandomGraphs) {
  for (std::uint64_t seed = 0; seed < 600; ++seed) {
    const Graph graph = testing::random_dag(2 + static_cast<int>(seed % 50),
                                            0.05 + 0.02 * static_cast<double>(seed % 6), seed, (seed % 4) * 0.15);
    const auto costs = testing::random_costs(graph, seed);
    for (StreamPolicy streams : testing::kStreamPolicies) {
      for (OrderPolicy order : testing::kOrderPolicies) {
        for (int cap : {0, 2}) {
          expect_well_formed(graph, make_plan(graph, PlanOptions{streams, order, cap}, costs),
                             fmt::format("seed {}, {}/{}, cap {}", seed, to_string(streams), to_string(order), cap));
        }
      }
    }
  }
}

TEST(CaptureActions, WellFormedForEveryPolicyOnTheModels) {
  const testing::ExportedModels models = testing::exported_models(testing::all_models());
  if (models.exported.empty()) GTEST_SKIP() << models.missing_text();
  for (const std::string& model : models.exported) {
    for (const char* extension : {"pt", "pt2"}) {
      const Graph graph = load(testing::model_path(model, extension));
      for (StreamPolicy streams : testing::kStreamPolicies) {
        expect_well_formed(graph, make_plan(graph, PlanOptions{streams, OrderPolicy::kOpara}),
                           fmt::format("{}.{} {}", model, extension, to_string(streams)));
      }
    }
  }
}

// 64 branches need 64 side streams at once: twice PyTorch's pool of 32, so two of them sharing
// a stream would serialise branches (or, in a capture, join a stream twice).
TEST(CaptureActions, SixtyFourBranchesForkSixtyFourStreamsAndJoinEveryOne) {
  const Graph graph = testing::wide_graph(64);
  const Plan plan = make_plan(graph, {});
  ASSERT_EQ(plan.stream_count, 64);
  ASSERT_THAT(validate(graph, plan), IsEmpty());
  const auto actions = capture_actions(graph, plan);
  EXPECT_THAT(check_capture_actions(graph, plan, actions), IsEmpty()) << describe(actions);

  std::vector<int> forked;
  std::vector<int> joined;
  std::set<int> branch_streams;  // the streams of the branches' first nodes
  for (const CaptureAction& action : actions) {
    if (action.step == kFork) forked.push_back(action.stream);
    if (action.step == kJoin) joined.push_back(action.stream);
    if (action.step == kRun && graph.node(action.node).kind == "test::scale") branch_streams.insert(action.stream);
  }
  std::vector<int> every_stream(64);
  for (int s = 0; s < 64; ++s) every_stream[s] = s;
  std::sort(forked.begin(), forked.end());
  std::sort(joined.begin(), joined.end());
  EXPECT_THAT(forked, ElementsAreArray(every_stream)) << "each side stream forked from the origin once";
  EXPECT_THAT(joined, ElementsAreArray(every_stream)) << "each side stream joined back once";
  EXPECT_EQ(branch_streams.size(), 64u) << "two branches share a stream";
  EXPECT_THAT(branch_streams, Not(Contains(kOriginStream)));
}

TEST(CaptureActions, CheckRejectsBrokenLists) {
  const Graph graph = diamond_with_view();
  const Plan plan = diamond_plan();
  const auto good = capture_actions(graph, plan);
  auto find = [&](const std::vector<CaptureAction>& list, CaptureAction action) {
    return std::find(list.begin(), list.end(), action) - list.begin();
  };

  auto unjoined = good;
  unjoined.erase(unjoined.begin() + find(unjoined, {kJoin, 1}));
  EXPECT_THAT(check_capture_actions(graph, plan, unjoined), Contains(HasSubstr("stream 1 is never joined")));

  auto unforked = good;
  unforked.erase(unforked.begin() + find(unforked, {kFork, 2}));
  EXPECT_THAT(check_capture_actions(graph, plan, unforked), Contains(HasSubstr("before its fork")));

  auto early_wait = good;  // s0 waits on b before b's record
  early_wait.erase(early_wait.begin() + find(early_wait, {kWait, 0, 1}));
  early_wait.insert(early_wait.begin() + find(early_wait, {kRun, 1, 1}), {kWait, 0, 1});
  EXPECT_THAT(check_capture_actions(graph, plan, early_wait), Contains(HasSubstr("before its event is recorded")));

  auto missing_wait = good;
  missing_wait.erase(missing_wait.begin() + find(missing_wait, {kWait, 2, 4}));
  EXPECT_THAT(check_capture_actions(graph, plan, missing_wait), Contains(HasSubstr("without the plan's wait")));

  auto wrong_stream = good;
  wrong_stream[find(wrong_stream, {kRun, 2, 5})].stream = 0;
  EXPECT_THAT(check_capture_actions(graph, plan, wrong_stream), Not(IsEmpty()));

  auto run_twice = good;
  run_twice.insert(run_twice.end() - 3, {kRun, 0, 3});
  EXPECT_THAT(check_capture_actions(graph, plan, run_twice), Contains(HasSubstr("runs 2 times")));

  auto view_early = good;  // the view before the node it views
  view_early.erase(view_early.begin() + find(view_early, {kRun, 1, 2}));
  view_early.insert(view_early.begin() + 1, {kRun, 0, 2});
  EXPECT_THAT(check_capture_actions(graph, plan, view_early), Contains(HasSubstr("before its predecessor")));
}

}  // namespace
}  // namespace opara
