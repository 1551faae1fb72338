// Comm+SD (SIR+ Alg. 1) on graphs written inline: a node moves exactly when cpu + transfers <
// gpu + alpha, borderline included; chains move together or not at all; host nodes count as CPU
// side and views follow their producer; the loop converges, and the iteration cap stops it; a
// move is kept only when the makespan estimate drops. On random graphs the result is a fixed
// point of the rule and never estimated slower than the GPU alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "graph_builders.h"
#include "opara/error.h"
#include "opara/placement.h"
#include "overflow/placements.h"
#include "placement_fixtures.h"

namespace opara {
namespace {

using ::testing::ElementsAre;
using testing::graph_from_edges;
using ::testing::IsEmpty;
using testing::microsecond_costs;
using testing::out;

constexpr Placement G = Placement::kGpu;
constexpr Placement C = Placement::kCpu;
constexpr Placement H = Placement::kHost;

CommSdOptions rule_only() {
  CommSdOptions options;
  options.confirm_by_estimate = false;
  return options;
}

// x -> a -> b -> y: a is GPU-heavy, b cheap on the CPU; moving b copies a's output (30 us) in and
// b's (20 us) out, so b moves when cpu + 50 < 50 + 100.
std::vector<Placement> place_b(double cpu_us) {
  Graph graph = graph_from_edges(2, {{0, 1}});
  graph.add_output(out(1));
  PlacementCosts costs = microsecond_costs(graph, 50, cpu_us);
  costs.cpu_us[0] = 10000;
  costs.value_bytes[out(0)] = 30;
  costs.value_bytes[out(1)] = 20;
  return comm_sd_placement(graph, costs, rule_only()).placement;
}

TEST(CommSd, NodeMovesExactlyWhenCpuPlusTransfersIsBelowGpuPlusAlpha) {
  EXPECT_THAT(place_b(0), ElementsAre(G, C));
  EXPECT_THAT(place_b(99), ElementsAre(G, C));
  EXPECT_THAT(place_b(99.999), ElementsAre(G, C));
  EXPECT_THAT(place_b(100), ElementsAre(G, G));  // equal is not below
  EXPECT_THAT(place_b(101), ElementsAre(G, G));
}

TEST(CommSd, SlowdownAloneIsNotEnoughWhenCopiesCostMore) {
  // SD would move b (60 < 50 + 100); its copies (100 in, 100 out) send it back.
  Graph graph = graph_from_edges(2, {{0, 1}});
  graph.add_output(out(1));
  PlacementCosts costs = microsecond_costs(graph, 50, 60, 100);
  costs.cpu_us[0] = 10000;
  const PlacementReport report = comm_sd_placement(graph, costs, rule_only());
  EXPECT_THAT(report.placement, ElementsAre(G, G));
  EXPECT_THAT(report.rule_moves, IsEmpty());
}

TEST(CommSd, ChainMovesTogetherWhenItsInnerCopiesAreFree) {
  // The example at the top of comm_sd.cpp: 40 us per copy keeps a and b on the CPU, since a
  // chain on the CPU pays only for what enters and leaves it; 100 us sends both back.
  Graph graph = graph_from_edges(2, {{0, 1}});
  graph.add_output(out(1));
  PlacementReport cheap = comm_sd_placement(graph, microsecond_costs(graph, 50, 60, 40), rule_only());
  EXPECT_THAT(cheap.placement, ElementsAre(C, C));
  EXPECT_EQ(cheap.iterations, 1);
  EXPECT_TRUE(cheap.converged);
  PlacementReport dear = comm_sd_placement(graph, microsecond_costs(graph, 50, 60, 100), rule_only());
  EXPECT_THAT(dear.placement, ElementsAre(G, G));
  EXPECT_EQ(dear.iterations, 2);
  EXPECT_TRUE(dear.converged);
}

// x -> a -> b -> c -> d -> y, all SD candidates; y's copy (200 us) sends d back, and each move
// back makes its predecessor pay a 100 us copy: one node per pass, back to a.
PlacementReport cascade(int max_iterations) {
  Graph graph = graph_from_edges(4, {{0, 1}, {1, 2}, {2, 3}});
  graph.add_output(out(3));
  PlacementCosts costs = microsecond_costs(graph, 50, 60, 100);
  costs.value_bytes[0] = 0;  // x
  costs.value_bytes[out(3)] = 200;
  CommSdOptions options = rule_only();
  options.max_iterations = max_iterations;
  return comm_sd_placement(graph, costs, options);
}

TEST(CommSd, LoopConvergesOneMoveBackPerPass) {
  const PlacementReport report = cascade(32);
  EXPECT_THAT(report.placement, ElementsAre(G, G, G, G));
  EXPECT_EQ(report.iterations, 5);  // four passes that each move one node, one that moves none
  EXPECT_TRUE(report.converged);
}

TEST(CommSd, IterationCapStopsTheLoop) {
  const PlacementReport report = cascade(2);
  EXPECT_THAT(report.placement, ElementsAre(C, C, G, G));
  EXPECT_EQ(report.iterations, 2);
  EXPECT_FALSE(report.converged);
  CommSdOptions zero;
  zero.max_iterations = 0;
  Graph graph = graph_from_edges(1, {});
  EXPECT_THROW(comm_sd_placement(graph, microsecond_costs(graph, 1, 1), zero), Error);
}

TEST(CommSd, HostNodesStayAndCountAsCpuSide) {
  // x -> h -> b: h cannot be captured, so its 100-byte output is on the host already and b
  // (60 < 150) moves without paying for it; with h on the GPU it would not.
  for (const bool uncapturable : {true, false}) {
    Graph graph;
    const ValueId x = graph.add_input("x");
    const std::uint32_t flags = uncapturable ? (kLaunchesKernel | kNotCapturable) : kLaunchesKernel;
    const NodeId h = graph.add_node("aten::nonzero", {x}, {"Tensor"}, flags);
    graph.add_node("op", {graph.node(h).outputs[0]}, {"Tensor"});
    PlacementCosts costs = microsecond_costs(graph, 50, 60);
    costs.cpu_us[h] = 1e6;
    costs.value_bytes[graph.node(h).outputs[0]] = 100;
    const PlacementReport report = comm_sd_placement(graph, costs, rule_only());
    EXPECT_THAT(report.placement, uncapturable ? ElementsAre(H, C) : ElementsAre(G, G));
  }
}

TEST(CommSd, ViewsFollowTheirProducer) {
  // x -> a -> v -> b: v launches no kernel and lives where a's output does.
  Graph graph = graph_from_edges(3, {{0, 1}, {1, 2}}, /*kernel_free=*/{1});
  PlacementCosts cheap_a = microsecond_costs(graph, 50, 60);
  cheap_a.cpu_us[2] = 1e6;
  EXPECT_THAT(comm_sd_placement(graph, cheap_a, rule_only()).placement, ElementsAre(C, C, G));
  PlacementCosts dear_a = microsecond_costs(graph, 50, 60);
  dear_a.cpu_us[0] = 1e6;
  EXPECT_THAT(comm_sd_placement(graph, dear_a, rule_only()).placement, ElementsAre(G, G, C));
}

TEST(CommSd, MoveIsKeptOnlyWhenTheEstimateDrops) {
  // x -> a -> b: a alone on the CPU passes the rule (60 < 150, copies free) but the split costs a
  // sync and a launch (15 us) on the only path: 50 + 50 on the GPU against 10 + 60 + 5 + 50.
  Graph chain = graph_from_edges(2, {{0, 1}});
  chain.add_output(out(1));
  PlacementCosts costs = microsecond_costs(chain, 50, 60);
  costs.cpu_us[1] = 1e6;
  CommSdOptions options;
  options.gpu_streams = 1;
  options.host_threads = 1;
  const PlacementReport rejected = comm_sd_placement(chain, costs, options);
  EXPECT_THAT(rejected.rule_moves, ElementsAre(0));
  EXPECT_THAT(rejected.placement, ElementsAre(G, G));
  EXPECT_THAT(rejected.moved, IsEmpty());
  EXPECT_EQ(rejected.moves_tried, 1);
  EXPECT_EQ(rejected.moves_kept, 0);
  EXPECT_DOUBLE_EQ(rejected.none_us, 100);
  EXPECT_DOUBLE_EQ(rejected.chosen_us, 100);

  // x -> a, x -> b, (a, b) -> c on one stream: b on the host runs beside a.
  Graph fork = graph_from_edges(3, {{0, 2}, {1, 2}});
  fork.add_output(out(2));
  PlacementCosts fork_costs = microsecond_costs(fork, 100, 1e6);
  fork_costs.gpu_us[2] = 10;
  fork_costs.cpu_us[1] = 100;
  const PlacementReport kept = comm_sd_placement(fork, fork_costs, options);
  EXPECT_THAT(kept.placement, ElementsAre(G, C, G));
  EXPECT_THAT(kept.moved, ElementsAre(1));
  EXPECT_EQ(kept.moves_kept, 1);
  EXPECT_DOUBLE_EQ(kept.none_us, 210);
  EXPECT_DOUBLE_EQ(kept.chosen_us, 125);  // b: host 10..110, back on the GPU at 115; c 115..125
}

// The rule's transfers, written again from its definition.
double transfers(const Graph& graph, const std::vector<Placement>& placement, const PlacementCosts& costs,
                 const Node& node) {
  const auto cpu_side = [&](NodeId id) { return id != kNoNode && placement[id] != Placement::kGpu; };
  double us = 0;
  std::vector<ValueId> inputs = node.inputs;
  std::sort(inputs.begin(), inputs.end());
  inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());
  for (ValueId input : inputs) {
    if (!cpu_side(graph.value(input).producer)) us += costs.value_bytes[input];
  }
  for (ValueId output : node.outputs) {
    const auto& users = graph.value(output).users;
    const bool returned = std::count(graph.outputs().begin(), graph.outputs().end(), output) > 0;
    if (returned || std::any_of(users.begin(), users.end(), [&](NodeId user) { return !cpu_side(user); })) {
      us += costs.value_bytes[output];
    }
  }
  return us;
}

TEST(CommSd, RandomGraphsReachAFixedPointNeverEstimatedSlower) {
  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> gpu(1, 200), cpu(1, 400), bytes(0, 120);
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    const Graph graph = testing::random_flagged_dag(12 + seed % 20, 0.2, seed, 0.15, 0.05);
    PlacementCosts costs = microsecond_costs(graph, 0, 0);
    for (auto& us : costs.gpu_us) us = gpu(random);
    for (auto& us : costs.cpu_us) us = cpu(random);
    for (auto& b : costs.value_bytes) b = bytes(random);
    const PlacementReport rule = comm_sd_placement(graph, costs, rule_only());
    ASSERT_TRUE(rule.converged) << "seed " << seed;
    EXPECT_LE(rule.iterations, static_cast<int>(graph.size()) + 1);
    for (const Node& node : graph.nodes()) {
      const Placement p = rule.placement[node.id];
      if (node.has(kNotCapturable)) {
        EXPECT_EQ(p, H);
      } else if (node.has(kLaunchesKernel)) {
        const bool cpu_wins = costs.cpu_us[node.id] + transfers(graph, rule.placement, costs, node) <
                              costs.gpu_us[node.id] + costs.alpha_us;
        EXPECT_EQ(p == C, cpu_wins) << "seed " << seed << ", " << graph.describe(node.id);
      }
    }
    const PlacementReport confirmed = comm_sd_placement(graph, costs);
    EXPECT_LE(confirmed.chosen_us, confirmed.none_us) << "seed " << seed;
    EXPECT_LE(confirmed.moves_kept, confirmed.moves_tried);
    for (NodeId id : confirmed.moved) EXPECT_EQ(rule.placement[id], C) << "seed " << seed;
  }
}

TEST(CommSd, CostsOfAnotherGraphAreRefused) {
  const Graph graph = graph_from_edges(3, {{0, 1}});
  const Graph other = graph_from_edges(2, {{0, 1}});
  EXPECT_THROW(comm_sd_placement(graph, microsecond_costs(other, 1, 1)), Error);
}

}  // namespace
}  // namespace opara
