// Stream allocation: Opara's Alg. 1 (paper and later rule), Nimble's minimum path cover, the
// single stream, and the cap, on graphs whose answers are known by hand or by brute force.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>

#include "graph/graph_analysis.h"
#include "graph/reachability.h"
#include "graph_builders.h"
#include "opara/error.h"
#include "schedule/kernel_dag.h"
#include "schedule/stages.h"

namespace opara {
namespace {

using testing::graph_from_edges;
using testing::random_dag;

StreamAssignment streams_of(const Graph& graph, StreamPolicy policy) {
  return allocate_streams(graph, policy, topological_order(graph));
}

// Two GoogLeNet inception modules, like the segment of the paper's Fig. 6: a stem, four branches
// (1x1; 1x1 -> 3x3; 1x1 -> 5x5; pool -> 1x1), a concat; then again.
//   0 stem; module: 1 | 2 -> 3 | 4 -> 5 | 6 -> 7, 8 concat; second module 9..16 the same.
Graph two_inception_modules() {
  std::vector<std::pair<int, int>> edges;
  int input = 0;
  for (int base : {1, 9}) {
    edges.insert(edges.end(), {{input, base},
                               {input, base + 1},
                               {base + 1, base + 2},
                               {input, base + 3},
                               {base + 3, base + 4},
                               {input, base + 5},
                               {base + 5, base + 6},
                               {base, base + 7},
                               {base + 2, base + 7},
                               {base + 4, base + 7},
                               {base + 6, base + 7}});
    input = base + 7;
  }
  return graph_from_edges(17, edges);
}

// Every stream is a path: consecutive nodes of a stream (in launch order) are joined by an edge.
void expect_streams_are_paths(const Graph& graph, const StreamAssignment& streams, const std::vector<NodeId>& order) {
  std::map<int, NodeId> last;
  for (NodeId node : order) {
    const int stream = streams.stream_of[node];
    if (stream == kNoStream) continue;
    if (auto found = last.find(stream); found != last.end()) {
      EXPECT_TRUE(Reachability(graph).reaches(found->second, node))
          << "stream " << stream << " runs " << found->second << " then " << node << " without a path between them";
    }
    last[stream] = node;
  }
}

TEST(OparaStreams, ChainStaysOnOneStream) {
  const Graph graph = graph_from_edges(4, {{0, 1}, {1, 2}, {2, 3}});
  const StreamAssignment streams = streams_of(graph, StreamPolicy::kOpara);
  EXPECT_EQ(streams.stream_count, 1);
  EXPECT_EQ(streams.stream_of, (std::vector<int>{0, 0, 0, 0}));
}

TEST(OparaStreams, FirstSuccessorInheritsAndSiblingsOpenStreams) {
  //   0 -> 1 -> 3, 0 -> 2 -> 3: 1 is 0's first successor, 3 is 1's.
  const Graph graph = graph_from_edges(4, {{0, 1}, {0, 2}, {1, 3}, {2, 3}});
  const StreamAssignment streams = streams_of(graph, StreamPolicy::kOpara);
  EXPECT_EQ(streams.stream_of, (std::vector<int>{0, 0, 1, 0}));
}

TEST(OparaStreams, ProgramOrderOfSuccessorsDecidesWhoInherits) {
  // The same fork, twice: the branch the model defines first inherits the producer's stream.
  //   0 -> 1 (long branch 1 -> 2), 0 -> 3
  const Graph long_first = graph_from_edges(4, {{0, 1}, {1, 2}, {0, 3}});
  EXPECT_EQ(streams_of(long_first, StreamPolicy::kOpara).stream_of, (std::vector<int>{0, 0, 0, 1}));
  //   0 -> 1, 0 -> 2 (long branch 2 -> 3)
  const Graph short_first = graph_from_edges(4, {{0, 1}, {0, 2}, {2, 3}});
  EXPECT_EQ(streams_of(short_first, StreamPolicy::kOpara).stream_of, (std::vector<int>{0, 0, 1, 1}));
}

TEST(OparaStreams, PredecessorOrderDecidesWhichStreamAJoinContinues) {
  //   0 -> 2, 1 -> 2: 2 is the first successor of both; it takes the stream of the argument read first.
  const Graph reads_0_first = graph_from_edges(3, {{0, 2}, {1, 2}});
  EXPECT_EQ(streams_of(reads_0_first, StreamPolicy::kOpara).stream_of[2], 0);
  const Graph reads_1_first = graph_from_edges(3, {{1, 2}, {0, 2}});
  EXPECT_EQ(streams_of(reads_1_first, StreamPolicy::kOpara).stream_of[2], 1);
}

TEST(OparaStreams, PaperRuleAndUnhandedRuleDiffer) {
  //   q=0 -> s1=2, p=1 -> s1=2, p=1 -> s2=3; s1 reads q first.
  const Graph graph = graph_from_edges(4, {{0, 2}, {1, 2}, {1, 3}});
  // Paper: s1 takes q's stream; s2 is not p's first successor, so it opens a third stream.
  const StreamAssignment paper = streams_of(graph, StreamPolicy::kOpara);
  EXPECT_EQ(paper.stream_of, (std::vector<int>{0, 1, 0, 2}));
  EXPECT_EQ(paper.stream_count, 3);
  // Later rule: p never handed its stream on, so s2 takes it.
  const StreamAssignment unhanded = streams_of(graph, StreamPolicy::kOparaUnhanded);
  EXPECT_EQ(unhanded.stream_of, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(unhanded.stream_count, 2);
}

TEST(OparaStreams, InceptionModulesLikeFig6) {
  const Graph graph = two_inception_modules();
  const auto order = topological_order(graph);
  const StreamAssignment opara = allocate_streams(graph, StreamPolicy::kOpara, order);
  // Each module runs its four branches at once: the first branch continues the stem's stream and
  // each other branch opens one; the concat continues the first branch's.
  EXPECT_EQ(opara.stream_count, 7);
  for (int base : {1, 9}) {
    const int input = base == 1 ? 0 : 8;
    EXPECT_EQ(opara.stream_of[base], opara.stream_of[input]);
    std::set<int> branches{opara.stream_of[base], opara.stream_of[base + 1], opara.stream_of[base + 3],
                           opara.stream_of[base + 5]};
    EXPECT_EQ(branches.size(), 4u);
    EXPECT_EQ(opara.stream_of[base + 7], opara.stream_of[base]);
  }
  expect_streams_are_paths(graph, opara, order);
}

TEST(NimbleStreams, InceptionModulesRunTheirBranchesOnFourStreams) {
  const Graph graph = two_inception_modules();
  const auto order = topological_order(graph);
  // Nimble's first step, a path cover of the reduction, needs 7 chains: no branch's path runs on
  // into the next module. Its second step covers the chains again by reachability: the second
  // module's branches continue the first module's streams, 4 in all, the graph's width.
  EXPECT_EQ(nimble_chains(kernel_dag(graph), order).stream_count, 7);
  const StreamAssignment nimble = allocate_streams(graph, StreamPolicy::kNimble, order);
  EXPECT_EQ(nimble.stream_count, 4);
  EXPECT_EQ(static_cast<std::size_t>(nimble.stream_count), width(graph));
  std::set<int> first{nimble.stream_of[1], nimble.stream_of[2], nimble.stream_of[4], nimble.stream_of[6]};
  std::set<int> second{nimble.stream_of[9], nimble.stream_of[10], nimble.stream_of[12], nimble.stream_of[14]};
  EXPECT_EQ(first.size(), 4u);
  EXPECT_EQ(second, first);
  expect_streams_are_paths(graph, nimble, order);
}

TEST(OparaStreams, KernelFreeNodesOpenNoStreamAndPassDependenciesOn) {
  //   0 -> 1 (view) -> 2, 1 -> 3: the view opens nothing; 2 is the first kernel successor of 0.
  const Graph graph = graph_from_edges(4, {{0, 1}, {1, 2}, {1, 3}}, /*kernel_free=*/{1});
  const StreamAssignment streams = streams_of(graph, StreamPolicy::kOpara);
  EXPECT_EQ(streams.stream_of, (std::vector<int>{0, kNoStream, 0, 1}));
  EXPECT_EQ(streams.stream_count, 2);
}

TEST(SingleStream, PutsEveryKernelNodeOnStreamZero) {
  const Graph graph = graph_from_edges(4, {{0, 1}, {0, 2}, {1, 3}}, {2});
  const StreamAssignment streams = streams_of(graph, StreamPolicy::kSingle);
  EXPECT_EQ(streams.stream_count, 1);
  EXPECT_EQ(streams.stream_of, (std::vector<int>{0, 0, kNoStream, 0}));
}

// The fewest vertex-disjoint paths along edges of the transitive reduction that cover every
// node, by trying every choice of "next node on my path".
int brute_force_path_cover(const Graph& graph) {
  std::vector<std::vector<int>> successors(graph.size());
  for (const Edge& edge : transitive_reduction(graph)) successors[edge.from].push_back(edge.to);
  const auto count = static_cast<int>(graph.size());
  int best_links = 0;
  std::vector<int> taken(count, 0);
  std::function<void(int, int)> search = [&](int node, int links) {
    if (node == count) {
      best_links = std::max(best_links, links);
      return;
    }
    search(node + 1, links);  // the path ends here
    for (int next : successors[node]) {
      if (taken[next]) continue;
      taken[next] = 1;
      search(node + 1, links + 1);
      taken[next] = 0;
    }
  };
  search(0, 0);
  return count - best_links;
}

TEST(NimbleChains, ChainCountIsTheMinimumPathCoverOnRandomGraphs) {
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const Graph graph = random_dag(3 + static_cast<int>(seed % 7), 0.2 + 0.05 * static_cast<double>(seed % 6), seed);
    const auto order = topological_order(graph);
    const StreamAssignment nimble = nimble_chains(kernel_dag(graph), order);
    ASSERT_EQ(nimble.stream_count, brute_force_path_cover(graph)) << "seed " << seed;
    // Consecutive nodes of a chain are joined by an edge of the reduction.
    std::set<std::pair<NodeId, NodeId>> reduced;
    for (const Edge& edge : transitive_reduction(graph)) reduced.emplace(edge.from, edge.to);
    std::map<int, NodeId> last;
    for (NodeId node : order) {
      const int stream = nimble.stream_of[node];
      if (auto found = last.find(stream); found != last.end()) {
        EXPECT_TRUE(reduced.count({found->second, node})) << "seed " << seed;
      }
      last[stream] = node;
    }
  }
}

// The most chains no two of which are ordered (chain i before chain j when i's last node reaches
// j's first), by trying every subset: by Dilworth, the fewest paths of chains that cover them.
int brute_force_chain_antichain(const Graph& graph, const StreamAssignment& chains, const std::vector<NodeId>& order) {
  const Reachability reach(graph);
  std::vector<NodeId> head(chains.stream_count, kNoNode);
  std::vector<NodeId> tail(chains.stream_count, kNoNode);
  for (NodeId node : order) {
    const int chain = chains.stream_of[node];
    if (head[chain] == kNoNode) head[chain] = node;
    tail[chain] = node;
  }
  const auto count = static_cast<std::uint32_t>(chains.stream_count);
  int best = 0;
  for (std::uint32_t subset = 1; subset < (1u << count); ++subset) {
    bool antichain = true;
    for (std::uint32_t i = 0; i < count && antichain; ++i) {
      for (std::uint32_t j = 0; j < count && antichain; ++j) {
        if (i != j && (subset >> i & 1u) && (subset >> j & 1u) && reach.reaches(tail[i], head[j])) antichain = false;
      }
    }
    if (antichain) best = std::max(best, __builtin_popcount(subset));
  }
  return best;
}

TEST(NimbleStreams, EachStreamIsAPathOfWholeChainsAndTheFewestOnRandomGraphs) {
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const Graph graph = random_dag(3 + static_cast<int>(seed % 10), 0.1 + 0.05 * static_cast<double>(seed % 8), seed);
    const auto order = topological_order(graph);
    const StreamAssignment chains = nimble_chains(kernel_dag(graph), order);
    const StreamAssignment nimble = allocate_streams(graph, StreamPolicy::kNimble, order);
    // Each chain runs whole on one stream, and each stream runs its nodes along paths.
    std::map<int, int> stream_of_chain;
    for (NodeId node : order) {
      const auto [found, added] = stream_of_chain.emplace(chains.stream_of[node], nimble.stream_of[node]);
      EXPECT_EQ(found->second, nimble.stream_of[node]) << "seed " << seed << ": chain split at node " << node;
    }
    expect_streams_are_paths(graph, nimble, order);
    EXPECT_LE(nimble.stream_count, chains.stream_count) << "seed " << seed;
    ASSERT_EQ(nimble.stream_count, brute_force_chain_antichain(graph, chains, order)) << "seed " << seed;
  }
}

TEST(OparaStreams, EveryStreamIsAPathOnRandomGraphs) {
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    const Graph graph = random_dag(20, 0.15, seed, /*kernel_free_share=*/0.2);
    const auto order = random_topological_order(graph, seed);
    for (StreamPolicy policy : {StreamPolicy::kOpara, StreamPolicy::kOparaUnhanded}) {
      const StreamAssignment streams = allocate_streams(graph, policy, order);
      expect_streams_are_paths(graph, streams, order);
    }
  }
}

TEST(StreamCap, MergesTotallyOrderedStreamsFirst) {
  // Two inception modules under Opara: 7 streams. Capped at 4, the branches of the second module
  // reuse the first module's branch streams (they are totally ordered through the concat).
  const Graph graph = two_inception_modules();
  const auto order = topological_order(graph);
  StreamAssignment streams = allocate_streams(graph, StreamPolicy::kOpara, order);
  cap_streams(graph, streams, 4, order);
  EXPECT_EQ(streams.stream_count, 4);
  for (int base : {1, 9}) {
    std::set<int> branches{streams.stream_of[base], streams.stream_of[base + 1], streams.stream_of[base + 3],
                           streams.stream_of[base + 5]};
    EXPECT_EQ(branches.size(), 4u) << "the branches of a module must stay parallel";
  }
}

TEST(StreamCap, AStreamPastTheCapJoinsTheOneWhereItStartsSoonest) {
  // Opara gives A = {0, 1, 7} (1 is costly), B = {2, 3, 4, 5} (a cheap chain), C = {6}. Capped at
  // two, C joins neither by order; it goes where node 6 could start first: behind B's cheap chain,
  // not behind node 1 on A, the stream with fewer nodes.
  const Graph graph = graph_from_edges(8, {{0, 1}, {0, 2}, {2, 3}, {3, 4}, {4, 5}, {0, 6}, {1, 7}, {5, 7}, {6, 7}});
  const auto order = topological_order(graph);
  const StreamAssignment uncapped = allocate_streams(graph, StreamPolicy::kOpara, order);
  ASSERT_EQ(uncapped.stream_count, 3);
  ASSERT_EQ(uncapped.stream_of[1], uncapped.stream_of[7]);
  ASSERT_EQ(uncapped.stream_of[2], uncapped.stream_of[5]);
  std::vector<NodeCost> costs(graph.size(), NodeCost{OpClass::kCompute, 1.0});
  costs[1].demand = 100;
  StreamAssignment streams = uncapped;
  cap_streams(graph, streams, 2, order, costs);
  EXPECT_EQ(streams.stream_count, 2);
  EXPECT_EQ(streams.stream_of[6], streams.stream_of[2]) << "node 6 would wait 100 behind node 1";
  EXPECT_NE(streams.stream_of[6], streams.stream_of[1]);
  // Every node costing the same, A (free after two nodes) is sooner than B (after five).
  streams = uncapped;
  cap_streams(graph, streams, 2, order);
  EXPECT_EQ(streams.stream_of[6], streams.stream_of[1]);
  EXPECT_THROW(cap_streams(graph, streams, 2, order, std::vector<NodeCost>(3)), Error);
}

TEST(StreamCap, NeverExceedsTheCapAndLeavesSmallAssignmentsAlone) {
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    const Graph graph = random_dag(30, 0.08, seed, 0.1);
    const auto order = random_topological_order(graph, seed + 1);
    for (int cap : {1, 2, 3, 5}) {
      StreamAssignment streams = allocate_streams(graph, StreamPolicy::kOpara, order);
      const StreamAssignment before = streams;
      cap_streams(graph, streams, cap, order);
      EXPECT_LE(streams.stream_count, cap);
      if (before.stream_count <= cap) {
        EXPECT_EQ(streams.stream_of, before.stream_of);
      }
      for (std::size_t node = 0; node < graph.size(); ++node) {
        EXPECT_EQ(streams.stream_of[node] == kNoStream, before.stream_of[node] == kNoStream);
        if (streams.stream_of[node] != kNoStream) {
          EXPECT_LT(streams.stream_of[node], streams.stream_count);
        }
      }
    }
  }
}

TEST(CappedOrder, AStreamStartsWhatAnotherStreamWaitsForBeforeItsOwnChain) {
  // Stream 0: 0, the chain 1 -> 2 -> 3 and the side node 4; stream 1: the chain 5 -> 6 -> 7 -> 8,
  // whose node 6 waits for 4 (multihead_rnn capped at two streams: a head's input projection on
  // the other head's stream). Launched head by head, stream 0 reaches 4 after its own chain and
  // stream 1 idles; the list schedule starts 4 first, its path to the end (4 6 7 8) being longer.
  const Graph graph = graph_from_edges(9, {{0, 1}, {1, 2}, {2, 3}, {0, 4}, {0, 5}, {5, 6}, {4, 6}, {6, 7}, {7, 8}});
  const std::vector<int> stream_of{0, 0, 0, 0, 0, 1, 1, 1, 1};
  const std::vector<NodeId> head_by_head{0, 1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<NodeId> order = list_scheduled_order(graph, stream_of, 2, head_by_head, {});
  EXPECT_EQ(order, (std::vector<NodeId>{0, 4, 5, 1, 6, 2, 7, 3, 8}));
  // Costs decide: a costly chain 1 -> 2 -> 3 has the longer path and goes first.
  std::vector<NodeCost> costs(graph.size(), NodeCost{OpClass::kCompute, 1.0});
  costs[2].demand = 10;
  const std::vector<NodeId> costed = list_scheduled_order(graph, stream_of, 2, head_by_head, costs);
  EXPECT_EQ(costed.at(1), 1);
}

TEST(CappedOrder, IsATopologicalOrderOfEveryNodeAndOnlyCappedPlansTakeIt) {
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const Graph graph = random_dag(30, 0.08, seed, 0.2);
    const auto order = random_topological_order(graph, seed + 1);
    StreamAssignment streams = allocate_streams(graph, StreamPolicy::kOpara, order);
    cap_streams(graph, streams, 2, order);
    const std::vector<NodeId> capped = list_scheduled_order(graph, streams.stream_of, streams.stream_count, order, {});
    ASSERT_EQ(capped.size(), graph.size());
    const std::vector<std::int32_t> position = positions_in(capped, graph.size());
    for (const Edge& edge : graph.edges()) {
      ASSERT_LT(position[edge.from], position[edge.to]) << "seed " << seed;
    }
    // A plan under its cap keeps its order policy's order.
    const Plan uncapped = make_plan(graph, PlanOptions{StreamPolicy::kOpara, OrderPolicy::kOpara, 0});
    EXPECT_EQ(uncapped.launch_order, launch_order(graph, OrderPolicy::kOpara)) << "seed " << seed;
  }
}

}  // namespace
}  // namespace opara
