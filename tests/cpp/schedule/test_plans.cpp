// Whole plans: every policy on thousands of random DAGs and on the exported models validates;
// JSON round trips; options are checked.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <iterator>

#include "graph/graph_analysis.h"
#include "graph_builders.h"
#include "model_files.h"
#include "opara/error.h"
#include "opara/load.h"
#include "opara/plan.h"
#include "plan_fixtures.h"

namespace opara {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::kOrderPolicies;
using testing::kStreamPolicies;
using testing::random_costs;
using testing::random_dag;

TEST(Plans, EveryPolicyValidatesOnThousandsOfRandomGraphs) {
  std::size_t plans = 0;
  for (std::uint64_t seed = 0; seed < 2000; ++seed) {
    const int size = 2 + static_cast<int>(seed % 40);
    const Graph graph = random_dag(size, 0.04 + 0.02 * static_cast<double>(seed % 8), seed, (seed % 3) * 0.15);
    const auto costs = random_costs(graph, seed);
    for (StreamPolicy streams : kStreamPolicies) {
      for (OrderPolicy order : kOrderPolicies) {
        for (int cap : {0, 1, 3}) {
          const Plan plan = make_plan(graph, PlanOptions{streams, order, cap}, costs);
          ASSERT_THAT(validate(graph, plan), IsEmpty())
              << "seed " << seed << ", " << to_string(streams) << "/" << to_string(order) << ", cap " << cap;
          if (cap > 0) {
            ASSERT_LE(plan.stream_count, cap);
          }
          ASSERT_LE(plan.wait_count(), plan.events_unreduced);
          ++plans;
        }
      }
    }
  }
  EXPECT_EQ(plans, 2000u * std::size(kStreamPolicies) * std::size(kOrderPolicies) * 3);
}

TEST(Plans, SingleStreamNeedsNoEvents) {
  const Graph graph = random_dag(40, 0.1, 9, 0.2);
  const Plan plan = make_plan(graph, PlanOptions{StreamPolicy::kSingle, OrderPolicy::kTopological, 0});
  EXPECT_EQ(plan.stream_count, 1);
  EXPECT_EQ(plan.wait_count(), 0u);
  EXPECT_EQ(plan.events_unreduced, 0u);
}

// A graph whose kernel nodes carry a plan's streams (Inductor's regions made nodes, each keeping
// the stream of the plan that cut it) is planned on those streams, whatever the policy.
TEST(Plans, StreamsAPlanGaveAlreadyAreKept) {
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    Graph graph = random_dag(30, 0.1, seed, 0.2);
    const Plan first = make_plan(graph, PlanOptions{StreamPolicy::kNimble});
    for (NodeId node = 0; node < static_cast<NodeId>(graph.size()); ++node)
      graph.set_planned_stream(node, first.stream_of[node]);
    for (StreamPolicy streams : kStreamPolicies) {
      const Plan again = make_plan(graph, PlanOptions{streams, OrderPolicy::kOpara}, random_costs(graph, seed));
      ASSERT_THAT(validate(graph, again), IsEmpty()) << "seed " << seed;
      EXPECT_EQ(again.stream_count, first.stream_count) << "seed " << seed << ", " << to_string(streams);
      for (NodeId a = 0; a < static_cast<NodeId>(graph.size()); ++a) {
        for (NodeId b = 0; b < static_cast<NodeId>(graph.size()); ++b) {
          if (first.stream_of[a] == kNoStream || first.stream_of[b] == kNoStream) continue;
          EXPECT_EQ(first.stream_of[a] == first.stream_of[b], again.stream_of[a] == again.stream_of[b])
              << "seed " << seed << ": nodes " << a << " and " << b << " share a stream in one plan only";
        }
      }
    }
  }
}

TEST(Plans, StreamsGivenToSomeKernelNodesOnlyAreNotAPlan) {
  Graph graph = random_dag(12, 0.2, 3);
  graph.set_planned_stream(0, 5);
  EXPECT_EQ(make_plan(graph, PlanOptions{StreamPolicy::kSingle}).stream_count, 1)
      << "the policy plans a graph whose nodes were not all planned";
}

TEST(Plans, JsonRoundTrip) {
  const Graph graph = random_dag(30, 0.1, 4, 0.2);
  Plan plan =
      make_plan(graph, PlanOptions{StreamPolicy::kOparaUnhanded, OrderPolicy::kOpara, 3}, random_costs(graph, 4));
  plan.cost_source = "profile";
  const Plan back = plan_from_json(to_json(plan));
  EXPECT_EQ(back, plan);
  EXPECT_THAT(validate(graph, back), IsEmpty());
}

TEST(Plans, JsonErrorsSayWhatIsWrong) {
  EXPECT_THROW(plan_from_json("{"), Error);
  EXPECT_THAT([] { plan_from_json(R"({"format": "something else"})"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("not an opara plan")));
  const Graph graph = random_dag(5, 0.3, 1);
  auto json = nlohmann::json::parse(to_json(make_plan(graph, PlanOptions{})));
  json["records"] = {99};
  EXPECT_THAT([&] { plan_from_json(json.dump()); },
              ::testing::ThrowsMessage<Error>(HasSubstr("node 99 is out of range")));
  json = nlohmann::json::parse(to_json(make_plan(graph, PlanOptions{})));
  json["stream_policy"] = "fastest";
  EXPECT_THAT([&] { plan_from_json(json.dump()); },
              ::testing::ThrowsMessage<Error>(
                  HasSubstr("expected one of: opara, opara-unhanded, nimble, single, trtllm, torchsched")));
}

TEST(Plans, PolicyNamesRoundTripAndBadOnesAreRejected) {
  for (StreamPolicy policy : kStreamPolicies) EXPECT_EQ(parse_stream_policy(to_string(policy)), policy);
  for (OrderPolicy policy : kOrderPolicies) EXPECT_EQ(parse_order_policy(to_string(policy)), policy);
  EXPECT_THROW(parse_stream_policy("greedy"), Error);
  EXPECT_THROW(parse_order_policy("random"), Error);
  EXPECT_THROW(make_plan(random_dag(3, 0.5, 1), PlanOptions{StreamPolicy::kOpara, OrderPolicy::kOpara, -1}), Error);
}

class ModelPlans : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelPlans, EveryPolicyValidatesAndOparaOpensAtLeastNimblesStreams) {
  OPARA_REQUIRE_MODEL(GetParam());
  for (const char* extension : {"pt", "pt2"}) {
    const Graph graph = load(testing::model_path(GetParam(), extension));
    for (StreamPolicy streams : kStreamPolicies) {
      for (OrderPolicy order : kOrderPolicies) {
        for (int cap : {0, 4}) {
          const Plan plan = make_plan(graph, PlanOptions{streams, order, cap}, random_costs(graph, 1));
          EXPECT_THAT(validate(graph, plan), IsEmpty()) << extension << " " << to_string(streams);
          const Plan with_regions =
              make_plan(graph, PlanOptions{streams, order, cap, /*regions=*/true}, random_costs(graph, 1));
          EXPECT_THAT(validate(graph, with_regions), IsEmpty()) << extension << " " << to_string(streams) << " regions";
          EXPECT_LE(with_regions.stream_count, plan.stream_count) << extension << " " << to_string(streams);
        }
      }
    }
    const Plan opara = make_plan(graph, PlanOptions{StreamPolicy::kOpara, OrderPolicy::kTopological, 0});
    const Plan nimble = make_plan(graph, PlanOptions{StreamPolicy::kNimble, OrderPolicy::kTopological, 0});
    const Plan single = make_plan(graph, PlanOptions{StreamPolicy::kSingle, OrderPolicy::kTopological, 0});
    EXPECT_GE(opara.stream_count, nimble.stream_count) << extension;
    EXPECT_GE(nimble.stream_count, single.stream_count) << extension;
    // Not a theorem (random graphs exist where Nimble's cover of its chains exceeds the width),
    // but what Nimble does on real models: no more streams than branches that can run at once.
    EXPECT_LE(static_cast<std::size_t>(nimble.stream_count), width(graph)) << extension;
    EXPECT_LE(opara.wait_count(), opara.events_unreduced);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ModelPlans,
                         ::testing::Values("googlenet", "inception_v3", "resnet50", "bert_base", "t5_small", "vit",
                                           "branchy", "chain", "inplace", "unet"));

TEST(ModelPlansGoogLeNet, RegionsAreTheStemAndEachInceptionBranch) {
  OPARA_REQUIRE_MODEL("googlenet");
  const Graph graph = load(testing::model_path("googlenet", "pt"));
  PlanOptions options{StreamPolicy::kOpara, OrderPolicy::kTopological, 0, /*regions=*/true,
                      /*region_min_share=*/0.0};
  const Plan plan = make_plan(graph, options);
  EXPECT_THAT(validate(graph, plan), IsEmpty());
  // Without costs every branch weighs its node count: none is merged, and the cut leaves the stem
  // and, per inception module, its four branches and the concat that joins them (with the pooling
  // after it, and after the last one the classifier).
  EXPECT_EQ(plan.region_count, 1 + 9 * 5);
  EXPECT_EQ(plan.stream_count, 28);
}

TEST(ModelPlansGoogLeNet, OparaOpensOneStreamPerExtraInceptionBranch) {
  OPARA_REQUIRE_MODEL("googlenet");
  const Graph graph = load(testing::model_path("googlenet", "pt"));
  const Plan plan = make_plan(graph, PlanOptions{StreamPolicy::kOpara, OrderPolicy::kTopological, 0});
  // Nine inception modules of four branches: 1 + 9 * 3 streams, as the paper reports.
  EXPECT_EQ(plan.stream_count, 28);
  // Nimble covers its 28 chains again: each later module's branches continue the earlier
  // modules' streams, 4 in all, as the paper reports for Nimble.
  const Plan nimble = make_plan(graph, PlanOptions{StreamPolicy::kNimble, OrderPolicy::kTopological, 0});
  EXPECT_EQ(nimble.stream_count, 4);
  EXPECT_THAT(validate(graph, nimble), IsEmpty());
}

}  // namespace
}  // namespace opara
