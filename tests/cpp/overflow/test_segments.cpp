// Segments: graphs written inline cut where the algorithm says (independent work before a host
// step, parallel host nodes in one step, host first, last, everywhere, nowhere; with HostOverlap,
// the work a host step does not read after what it reads); validate_segments
// accepts every cut of hundreds of random graphs and names what is wrong with broken ones; and
// run_segments, with a CpuParallelExecutor per graph segment and an EagerExecutor per host step,
// equals the eager reference bit for bit on random models with random host nodes and on exported
// models.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "exec/eager_executor.h"
#include "exec/outputs.h"
#include "exported_models.h"
#include "graph/graph_analysis.h"
#include "graph_builders.h"
#include "model_files.h"
#include "opara/error.h"
#include "opara/load.h"
#include "opara/plan.h"
#include "overflow/segments.h"
#include "random_models.h"
#include "runtime/cpu/cpu_parallel_executor.h"
#include "tools/model_inputs.h"
#include "tools/run_segments.h"

namespace opara {
namespace {

using ::testing::ElementsAre;
using testing::graph_from_edges;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::random_dag;
using testing::random_model;
using testing::unary;

constexpr SegmentKind G = SegmentKind::kGraph;
constexpr SegmentKind H = SegmentKind::kHost;

// ---- helpers --------------------------------------------------------------------------------

std::vector<bool> mask(std::size_t size, const std::vector<NodeId>& host) {
  std::vector<bool> result(size, false);
  for (NodeId id : host) result[id] = true;
  return result;
}

std::vector<std::vector<NodeId>> node_lists(const std::vector<Segment>& segments) {
  std::vector<std::vector<NodeId>> lists;
  for (const Segment& segment : segments) lists.push_back(segment.nodes);
  return lists;
}

std::vector<SegmentKind> kinds(const std::vector<Segment>& segments) {
  std::vector<SegmentKind> result;
  for (const Segment& segment : segments) result.push_back(segment.kind);
  return result;
}

ValueId out(const Graph& graph, NodeId id) {
  return graph.node(id).outputs[0];
}

// Ordering edges between random forward pairs, as in-place writes and views would add.
void add_random_order_edges(Graph& graph, int count, std::mt19937_64& random) {
  if (graph.size() < 2) return;
  std::uniform_int_distribution<NodeId> pick(0, static_cast<NodeId>(graph.size()) - 1);
  for (int k = 0; k < count; ++k) {
    NodeId from = pick(random);
    NodeId to = pick(random);
    if (from == to) continue;
    if (from > to) std::swap(from, to);
    graph.add_order_edge(from, to);
  }
}

std::vector<bool> random_mask(std::size_t size, double share, std::mt19937_64& random) {
  std::bernoulli_distribution coin(share);
  std::vector<bool> result(size);
  for (std::size_t k = 0; k < size; ++k) result[k] = coin(random);
  return result;
}

// The rule, checked independently of how split_segments computes it: each node sits in the
// first segment of its kind at or after the latest segment of its predecessors.
void expect_as_early_as_possible(const Graph& graph, const std::vector<Segment>& segments,
                                 const std::vector<bool>& host, const std::string& label) {
  std::vector<int> segment_of(graph.size(), -1);
  for (std::size_t s = 0; s < segments.size(); ++s) {
    for (NodeId id : segments[s].nodes) segment_of[id] = static_cast<int>(s);
  }
  for (const Node& node : graph.nodes()) {
    const SegmentKind kind = host[node.id] ? H : G;
    int earliest = 0;
    for (NodeId predecessor : node.predecessors) earliest = std::max(earliest, segment_of[predecessor]);
    while (earliest < static_cast<int>(segments.size()) && segments[earliest].kind != kind) ++earliest;
    ASSERT_EQ(segment_of[node.id], earliest) << label << ": " << graph.describe(node.id);
  }
}

// Sets this thread's intra-op threads for a scope: eager and host steps run on the caller.
class IntraOpThreads {
 public:
  explicit IntraOpThreads(int threads) : previous_(at::get_num_threads()) { at::set_num_threads(threads); }
  ~IntraOpThreads() { at::set_num_threads(previous_); }
  IntraOpThreads(const IntraOpThreads&) = delete;
  IntraOpThreads& operator=(const IntraOpThreads&) = delete;

 private:
  int previous_;
};

// Graph segments on a CpuParallelExecutor under make_plan's default plan, host steps on an
// EagerExecutor; one intra-op thread everywhere, so the result is comparable bit for bit.
class SegmentedModel {
 public:
  SegmentedModel(const Graph& graph, std::vector<Segment> segments, std::uint64_t jitter)
      : graph_(graph), segments_(std::move(segments)) {
    for (const Segment& segment : segments_) {
      if (segment.kind == G) {
        CpuExecutorOptions options;
        options.cpu.intra_op_threads = 1;
        options.jitter_seed = jitter++;
        parallel_.push_back(
            std::make_unique<CpuParallelExecutor>(segment.graph, make_plan(segment.graph, {}), options));
        eager_.push_back(nullptr);
      } else {
        parallel_.push_back(nullptr);
        eager_.push_back(std::make_unique<EagerExecutor>(segment.graph));
      }
    }
  }

  std::vector<c10::IValue> run(const std::vector<c10::IValue>& inputs) {
    return run_segments(graph_, segments_, inputs, [this](std::size_t index, const std::vector<c10::IValue>& in) {
      return segments_[index].kind == G ? parallel_[index]->run(in) : eager_[index]->run(in);
    });
  }

 private:
  const Graph& graph_;
  std::vector<Segment> segments_;
  std::vector<std::unique_ptr<CpuParallelExecutor>> parallel_;
  std::vector<std::unique_ptr<EagerExecutor>> eager_;
};

// ---- where nodes go -------------------------------------------------------------------------

// x -> a -> h (host) -> c ; x -> b. b does not depend on h: it runs in the first graph segment.
TEST(SegmentSplit, IndependentWorkLandsBeforeTheHostStep) {
  Graph graph = graph_from_edges(4, {{0, 2}, {2, 3}});
  graph.add_output(out(graph, 3));
  graph.add_output(out(graph, 1));
  const auto segments = split_segments(graph, mask(4, {2}));
  EXPECT_THAT(kinds(segments), ElementsAre(G, H, G));
  ASSERT_THAT(node_lists(segments), ElementsAre(ElementsAre(0, 1), ElementsAre(2), ElementsAre(3)));
  const ValueId x = graph.inputs()[0];
  EXPECT_THAT(segments[0].input_values, ElementsAre(x));
  EXPECT_THAT(segments[0].output_values, ElementsAre(out(graph, 0), out(graph, 1)));
  EXPECT_THAT(segments[1].input_values, ElementsAre(out(graph, 0)));
  EXPECT_THAT(segments[1].output_values, ElementsAre(out(graph, 2)));
  EXPECT_THAT(segments[2].input_values, ElementsAre(out(graph, 2)));
  EXPECT_THAT(segments[2].output_values, ElementsAre(out(graph, 3)));
  EXPECT_THAT(validate_segments(graph, segments), IsEmpty());
}

// a -> h1, a -> h2, (h1, h2) -> c: the two host nodes share one step.
TEST(SegmentSplit, ParallelHostNodesShareOneStep) {
  const Graph graph = graph_from_edges(4, {{0, 1}, {0, 2}, {1, 3}, {2, 3}});
  const auto segments = split_segments(graph, mask(4, {1, 2}));
  EXPECT_THAT(kinds(segments), ElementsAre(G, H, G));
  ASSERT_THAT(node_lists(segments), ElementsAre(ElementsAre(0), ElementsAre(1, 2), ElementsAre(3)));
  EXPECT_THAT(segments[1].input_values, ElementsAre(out(graph, 0)));
  EXPECT_THAT(segments[1].output_values, ElementsAre(out(graph, 1), out(graph, 2)));
  EXPECT_THAT(validate_segments(graph, segments), IsEmpty());
}

TEST(SegmentSplit, AHostChainWithoutGraphWorkBetweenIsOneStep) {
  const Graph graph = graph_from_edges(4, {{0, 1}, {1, 2}, {2, 3}});
  const auto segments = split_segments(graph, mask(4, {1, 2}));
  ASSERT_THAT(node_lists(segments), ElementsAre(ElementsAre(0), ElementsAre(1, 2), ElementsAre(3)));
  // The host step passes on only what leaves it.
  EXPECT_THAT(segments[1].output_values, ElementsAre(out(graph, 2)));
  EXPECT_EQ(segments[1].graph.size(), 2u);
  EXPECT_TRUE(segments[1].graph.has_edge(0, 1));
}

TEST(SegmentSplit, HostNodesWithGraphWorkBetweenTakeTwoSteps) {
  // h1 -> g -> h2, and an independent h3 that joins the first step.
  const Graph graph = graph_from_edges(4, {{0, 1}, {1, 2}});
  const auto segments = split_segments(graph, mask(4, {0, 2, 3}));
  EXPECT_THAT(kinds(segments), ElementsAre(H, G, H));
  ASSERT_THAT(node_lists(segments), ElementsAre(ElementsAre(0, 3), ElementsAre(1), ElementsAre(2)));
  EXPECT_THAT(validate_segments(graph, segments), IsEmpty());
}

TEST(SegmentSplit, HostNodeFirst) {
  // h -> a, h -> b: the host step opens.
  Graph graph = graph_from_edges(3, {{0, 1}, {0, 2}});
  auto segments = split_segments(graph, mask(3, {0}));
  EXPECT_THAT(kinds(segments), ElementsAre(H, G));
  ASSERT_THAT(node_lists(segments), ElementsAre(ElementsAre(0), ElementsAre(1, 2)));
  EXPECT_THAT(validate_segments(graph, segments), IsEmpty());
  // h -> a, and b on the input: b does not wait for the host, though it comes after it in program
  // order, so a graph segment opens after all.
  graph = graph_from_edges(3, {{0, 1}});
  segments = split_segments(graph, mask(3, {0}));
  EXPECT_THAT(kinds(segments), ElementsAre(G, H, G));
  ASSERT_THAT(node_lists(segments), ElementsAre(ElementsAre(2), ElementsAre(0), ElementsAre(1)));
  EXPECT_THAT(validate_segments(graph, segments), IsEmpty());
}

TEST(SegmentSplit, HostNodeLastProducesTheModelOutput) {
  Graph graph = graph_from_edges(3, {{0, 1}, {1, 2}});
  graph.add_output(out(graph, 2));
  const auto segments = split_segments(graph, mask(3, {2}));
  EXPECT_THAT(kinds(segments), ElementsAre(G, H));
  ASSERT_THAT(node_lists(segments), ElementsAre(ElementsAre(0, 1), ElementsAre(2)));
  EXPECT_THAT(segments[1].output_values, ElementsAre(out(graph, 2)));
  EXPECT_EQ(segments[1].graph.outputs().size(), 1u);
  EXPECT_THAT(validate_segments(graph, segments), IsEmpty());
}

TEST(SegmentSplit, AllHostIsOneHostStep) {
  const Graph graph = random_dag(12, 0.3, 5);
  const auto segments = split_segments(graph, std::vector<bool>(graph.size(), true));
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].kind, H);
  EXPECT_EQ(segments[0].graph.edges().size(), graph.edges().size());
}

// Without host nodes the one segment is the graph itself: same nodes, values, edges, inputs and
// outputs.
TEST(SegmentSplit, NoHostIsOneSegmentEqualToTheGraph) {
  std::mt19937_64 random(3);
  Graph graph = random_dag(20, 0.2, 3, 0.2);
  add_random_order_edges(graph, 10, random);
  graph.add_output(out(graph, 19));
  graph.add_output(out(graph, 4));
  const auto segments = split_segments(graph, std::vector<bool>(graph.size(), false));
  ASSERT_EQ(segments.size(), 1u);
  const Graph& part = segments[0].graph;
  EXPECT_EQ(segments[0].kind, G);
  ASSERT_EQ(part.size(), graph.size());
  EXPECT_EQ(part.inputs(), graph.inputs());
  EXPECT_EQ(part.outputs(), (std::vector<ValueId>{out(graph, 4), out(graph, 19)})) << "ascending, not model order";
  for (const Node& node : graph.nodes()) {
    const Node& copy = part.node(node.id);
    EXPECT_EQ(copy.kind, node.kind);
    EXPECT_EQ(copy.flags, node.flags);
    EXPECT_EQ(copy.inputs, node.inputs);
    EXPECT_EQ(copy.outputs, node.outputs);
    EXPECT_EQ(copy.predecessors, node.predecessors) << "argument order, then ordering edges";
    EXPECT_EQ(copy.successors, node.successors);
  }
  ASSERT_EQ(part.edges().size(), graph.edges().size());
  for (std::size_t k = 0; k < graph.edges().size(); ++k) {
    EXPECT_EQ(part.edges()[k].from, graph.edges()[k].from);
    EXPECT_EQ(part.edges()[k].to, graph.edges()[k].to);
    EXPECT_EQ(part.edges()[k].kind, graph.edges()[k].kind);
  }
}

TEST(SegmentSplit, AnEmptyGraphHasNoSegments) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  graph.add_output(x);
  EXPECT_THAT(split_segments(graph, {}), IsEmpty());
  EXPECT_THAT(validate_segments(graph, {}), IsEmpty());
}

TEST(SegmentSplit, AWrongMaskSizeIsAnError) {
  const Graph graph = graph_from_edges(3, {{0, 1}});
  EXPECT_THROW(split_segments(graph, mask(2, {})), Error);
  EXPECT_THROW(split_segments(graph, mask(4, {})), Error);
}

// An ordering edge holds a node back like a data edge: g reads nothing from h but must follow it.
TEST(SegmentSplit, OrderingEdgesCountAndAreKeptInsideASegment) {
  Graph graph = graph_from_edges(4, {{0, 1}});
  graph.add_order_edge(1, 3);  // h -> g: across segments
  graph.add_order_edge(0, 2);  // inside the first graph segment
  const auto segments = split_segments(graph, mask(4, {1}));
  ASSERT_THAT(node_lists(segments), ElementsAre(ElementsAre(0, 2), ElementsAre(1), ElementsAre(3)));
  const Graph& first = segments[0].graph;
  ASSERT_EQ(first.edges().size(), 1u);
  EXPECT_EQ(first.edges()[0].kind, EdgeKind::kOrder);
  EXPECT_TRUE(first.has_edge(0, 1));
  // Nothing flows from the host step to the last segment: it reads the model input only.
  EXPECT_THAT(segments[1].output_values, IsEmpty());
  EXPECT_THAT(segments[2].input_values, ElementsAre(graph.inputs()[0]));
  EXPECT_THAT(validate_segments(graph, segments), IsEmpty());
}

// v made in segment 0 is read by segments 1 and 2 (twice by one node): one output, two inputs.
TEST(SegmentSplit, AValueReadBySeveralLaterSegmentsIsOutputOnce) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId a = graph.add_node("test::a", {x}, {"Tensor"});
  const ValueId v = out(graph, a);
  const NodeId h = graph.add_node("test::h", {v}, {"Tensor"});
  const NodeId c = graph.add_node("test::c", {v, out(graph, h), v}, {"Tensor"});
  graph.add_output(out(graph, c));
  const auto segments = split_segments(graph, mask(3, {h}));
  ASSERT_EQ(segments.size(), 3u);
  EXPECT_THAT(segments[0].output_values, ElementsAre(v));
  EXPECT_THAT(segments[1].input_values, ElementsAre(v));
  EXPECT_THAT(segments[2].input_values, ElementsAre(v, out(graph, h)));
  // Segment 2's node reads its two inputs in the argument order of the whole graph's node.
  const Graph& last = segments[2].graph;
  EXPECT_EQ(last.node(0).inputs, (std::vector<ValueId>{last.inputs()[0], last.inputs()[1], last.inputs()[0]}));
  EXPECT_THAT(validate_segments(graph, segments), IsEmpty());
}

// Nodes reading only constants: a graph one lands in the first segment, a host one in the first
// step, whatever their place in program order.
TEST(SegmentSplit, NodesWithoutInputs) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId a = graph.add_node("test::a", {x}, {"Tensor"});
  const NodeId h = graph.add_node("test::h", {out(graph, a)}, {"Tensor"});
  const NodeId b = graph.add_node("test::b", {out(graph, h)}, {"Tensor"});
  const NodeId k = graph.add_node("aten::zeros", {}, {"Tensor"});
  const NodeId hk = graph.add_node("aten::item", {}, {"Scalar"}, kNotCapturable);
  graph.add_output(out(graph, b));
  graph.add_output(out(graph, k));
  graph.add_output(out(graph, hk));
  const auto segments = split_segments(graph, mask(5, {h, hk}));
  ASSERT_THAT(node_lists(segments), ElementsAre(ElementsAre(a, k), ElementsAre(h, hk), ElementsAre(b)));
  EXPECT_THAT(segments[0].output_values, ElementsAre(out(graph, a), out(graph, k)));
  EXPECT_THAT(segments[1].input_values, ElementsAre(out(graph, a)));
  EXPECT_THAT(validate_segments(graph, segments), IsEmpty());
}

// A model input read directly by a late segment is an input of that segment; one returned as a
// model output needs no segment at all.
TEST(SegmentSplit, ModelInputsReadLateOrReturned) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const ValueId y = graph.add_input("y");
  const NodeId a = graph.add_node("test::a", {x}, {"Tensor"});
  const NodeId h = graph.add_node("test::h", {out(graph, a)}, {"Tensor"});
  const NodeId c = graph.add_node("test::c", {out(graph, h), y}, {"Tensor"});
  graph.add_output(y);
  graph.add_output(out(graph, c));
  graph.add_output(x);
  const auto segments = split_segments(graph, mask(3, {h}));
  ASSERT_EQ(segments.size(), 3u);
  EXPECT_THAT(segments[2].input_values, ElementsAre(y, out(graph, h)));
  EXPECT_EQ(segments[2].graph.value(segments[2].graph.inputs()[0]).name, "y");
  EXPECT_THAT(validate_segments(graph, segments), IsEmpty());
}

TEST(SegmentSplit, SegmentGraphsKeepNamesSourcesTypesAndOps) {
  Graph graph;
  graph.source_path = "model.pt";
  const ValueId x = graph.add_input("x", "Tensor");
  const auto relu = unary([](const at::Tensor& t) { return t.relu(); });
  const NodeId a = graph.add_node("aten::relu", {x}, {"Tensor"}, kLaunchesKernel, relu);
  graph.set_source(a, "model.py:3", "");
  graph.set_value_name(out(graph, a), "hidden");
  const NodeId h = graph.add_node("aten::item", {out(graph, a)}, {"Scalar"}, kNotCapturable);
  graph.set_source(h, "model.py:4", "dim=0");
  graph.set_value_name(out(graph, h), "count");
  graph.add_output(out(graph, h));
  const auto segments = split_segments(graph, uncapturable_nodes(graph));
  ASSERT_EQ(segments.size(), 2u);
  for (const Segment& segment : segments) EXPECT_EQ(segment.graph.source_path, "model.pt");
  const Graph& first = segments[0].graph;
  EXPECT_EQ(first.node(0).op, relu) << "the same op object, not a copy";
  EXPECT_EQ(first.node(0).source, "model.py:3");
  EXPECT_EQ(first.value(first.node(0).outputs[0]).name, "hidden");
  const Graph& second = segments[1].graph;
  EXPECT_EQ(second.value(second.inputs()[0]).name, "hidden");
  EXPECT_EQ(second.node(0).constants, "dim=0");
  EXPECT_EQ(second.node(0).flags, std::uint32_t{kNotCapturable});
  EXPECT_EQ(second.value(second.node(0).outputs[0]).type, "Scalar");
  EXPECT_EQ(second.value(second.outputs()[0]).name, "count");
  EXPECT_EQ(second.describe(0), "node 0 (aten::item at model.py:4)");
}

TEST(SegmentSplit, UncapturableNodesAreTheFlaggedOnes) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId a = graph.add_node("aten::relu", {x}, {"Tensor"});
  const NodeId n = graph.add_node("aten::nonzero", {out(graph, a)}, {"Tensor"}, kLaunchesKernel | kNotCapturable);
  graph.add_node("aten::view", {out(graph, n)}, {"Tensor"}, kView);
  EXPECT_THAT(uncapturable_nodes(graph), ElementsAre(false, true, false));
}

// ---- random graphs: valid and as early as possible ----------------------------------------

TEST(SegmentValidate, EveryCutOfRandomGraphsIsValidAndEarliest) {
  for (std::uint64_t seed = 1; seed <= 600; ++seed) {
    std::mt19937_64 random(seed);
    const int count = 1 + static_cast<int>(seed * 7919 % 60);
    const double density = std::uniform_real_distribution<double>(0.02, 0.4)(random);
    Graph graph = random_dag(count, density, seed, 0.2);
    add_random_order_edges(graph, count / 4, random);
    for (NodeId id = 0; id < count; id += 3) graph.add_output(out(graph, id));
    const double share = std::vector<double>{0, 0.05, 0.2, 0.5, 0.9, 1}[seed % 6];
    const std::vector<bool> host = random_mask(graph.size(), share, random);
    const auto segments = split_segments(graph, host);
    const std::string label = "seed " + std::to_string(seed);
    ASSERT_THAT(validate_segments(graph, segments), IsEmpty()) << label;
    ASSERT_NO_FATAL_FAILURE(expect_as_early_as_possible(graph, segments, host, label));
    for (const Segment& segment : segments) {
      for (NodeId id : segment.nodes) ASSERT_EQ(host[id], segment.kind == H) << label;
    }
  }
}

// ---- overlapping host steps ------------------------------------------------------------------

std::vector<bool> during_flags(const std::vector<Segment>& segments) {
  std::vector<bool> flags;
  for (const Segment& segment : segments) flags.push_back(segment.during_next_host_step);
  return flags;
}

// x -> a -> h (host) -> c ; x -> b. The host step reads a only: b gets a segment of its own after
// a, launched while the host works.
TEST(SegmentOverlap, WorkTheHostStepDoesNotReadGoesAfterWhatItReads) {
  Graph graph = graph_from_edges(4, {{0, 2}, {2, 3}});
  graph.add_output(out(graph, 3));
  graph.add_output(out(graph, 1));
  const auto segments = split_segments(graph, mask(4, {2}), HostOverlap::kSplit);
  EXPECT_THAT(kinds(segments), ElementsAre(G, G, H, G));
  ASSERT_THAT(node_lists(segments), ElementsAre(ElementsAre(0), ElementsAre(1), ElementsAre(2), ElementsAre(3)));
  EXPECT_THAT(during_flags(segments), ElementsAre(false, true, false, false));
  EXPECT_THAT(segments[0].output_values, ElementsAre(out(graph, 0)));
  EXPECT_THAT(segments[1].output_values, ElementsAre(out(graph, 1)));
  EXPECT_THAT(validate_segments(graph, segments), IsEmpty());
}

// Everything before the host step feeds it, directly or through a chain: nothing to overlap.
TEST(SegmentOverlap, AChainIntoTheHostStepStaysOneSegment) {
  const Graph graph = graph_from_edges(4, {{0, 1}, {1, 2}, {2, 3}});
  const auto segments = split_segments(graph, mask(4, {2}), HostOverlap::kSplit);
  ASSERT_THAT(node_lists(segments), ElementsAre(ElementsAre(0, 1), ElementsAre(2), ElementsAre(3)));
  EXPECT_THAT(during_flags(segments), ElementsAre(false, false, false));
}

// x -> h (host) ; x -> b -> c. The host step reads the model input only: all the graph work
// before it runs during it.
TEST(SegmentOverlap, AHostStepOnModelInputsOverlapsAllTheWorkBeforeIt) {
  const Graph graph = graph_from_edges(4, {{0, 3}, {1, 2}, {2, 3}});
  const auto segments = split_segments(graph, mask(4, {0}), HostOverlap::kSplit);
  EXPECT_THAT(kinds(segments), ElementsAre(G, H, G));
  ASSERT_THAT(node_lists(segments), ElementsAre(ElementsAre(1, 2), ElementsAre(0), ElementsAre(3)));
  EXPECT_THAT(during_flags(segments), ElementsAre(true, false, false));
}

// A node the host step depends on through an ordering edge (an in-place write it must see) feeds it.
TEST(SegmentOverlap, OrderingEdgesIntoTheHostStepFeedIt) {
  Graph graph = graph_from_edges(3, {});
  graph.add_order_edge(1, 2);
  const auto segments = split_segments(graph, mask(3, {2}), HostOverlap::kSplit);
  ASSERT_THAT(node_lists(segments), ElementsAre(ElementsAre(1), ElementsAre(0), ElementsAre(2)));
  EXPECT_THAT(during_flags(segments), ElementsAre(false, true, false));
}

// Merging each during_next_host_step segment into the one before gives the plain cut.
TEST(SegmentOverlap, RandomCutsAreValidAndRefineThePlainCut) {
  int overlapped = 0;
  for (std::uint64_t seed = 1; seed <= 400; ++seed) {
    std::mt19937_64 random(seed);
    const int count = 1 + static_cast<int>(seed * 7919 % 60);
    Graph graph = random_dag(count, std::uniform_real_distribution<double>(0.02, 0.3)(random), seed, 0.2);
    add_random_order_edges(graph, count / 4, random);
    for (NodeId id = 0; id < count; id += 3) graph.add_output(out(graph, id));
    const std::vector<bool> host = random_mask(graph.size(), std::vector<double>{0.05, 0.2, 0.5}[seed % 3], random);
    const auto plain = split_segments(graph, host);
    const auto split = split_segments(graph, host, HostOverlap::kSplit);
    const std::string label = "seed " + std::to_string(seed);
    ASSERT_THAT(validate_segments(graph, split), IsEmpty()) << label;
    std::vector<std::vector<NodeId>> merged;
    for (std::size_t s = 0; s < split.size(); ++s) {
      const bool joins = s > 0 && split[s].during_next_host_step && split[s - 1].kind == G;
      if (joins) {
        merged.back().insert(merged.back().end(), split[s].nodes.begin(), split[s].nodes.end());
        std::sort(merged.back().begin(), merged.back().end());
        ++overlapped;
      } else {
        merged.push_back(split[s].nodes);
      }
    }
    ASSERT_EQ(merged, node_lists(plain)) << label;
  }
  EXPECT_GE(overlapped, 100);
}

// ---- broken cuts are named ----------------------------------------------------------------

class SegmentValidateRejects : public ::testing::Test {
 protected:
  // x -> a -> h (host) -> c -> d ; x -> b -> d ; d is the model output.
  void SetUp() override {
    graph_ = graph_from_edges(5, {{0, 2}, {2, 3}, {1, 4}, {3, 4}});
    graph_.add_output(out(graph_, 4));
    segments_ = split_segments(graph_, mask(5, {2}));
    ASSERT_THAT(node_lists(segments_), ElementsAre(ElementsAre(0, 1), ElementsAre(2), ElementsAre(3, 4)));
    ASSERT_THAT(validate_segments(graph_, segments_), IsEmpty());
  }

  std::string problems() {
    std::string text;
    for (const std::string& problem : validate_segments(graph_, segments_)) text += problem + "\n";
    return text;
  }

  Graph graph_;
  std::vector<Segment> segments_;
};

TEST_F(SegmentValidateRejects, ANodeMissing) {
  segments_[2].nodes = {3};
  EXPECT_THAT(problems(), HasSubstr("node 4 (op4) is in no segment"));
}

TEST_F(SegmentValidateRejects, ANodeTwice) {
  segments_[2].nodes = {1, 3, 4};
  EXPECT_THAT(problems(), HasSubstr("node 1 (op1) is in segments 0 and 2"));
}

TEST_F(SegmentValidateRejects, AnEdgeGoingBackwards) {
  // c moved into the first segment, ahead of the host step it reads.
  segments_[0].nodes = {0, 1, 3};
  segments_[2].nodes = {4};
  EXPECT_THAT(problems(),
              HasSubstr("the data edge node 2 (op2) -> node 3 (op3) goes back from segment 1 to segment 0"));
}

TEST(SegmentValidate, RejectsAnOrderingEdgeGoingBackwards) {
  Graph graph = graph_from_edges(3, {});
  graph.add_order_edge(1, 2);
  auto segments = split_segments(graph, mask(3, {1}));
  ASSERT_THAT(node_lists(segments), ElementsAre(ElementsAre(0), ElementsAre(1), ElementsAre(2)));
  segments[0].nodes = {0, 2};
  segments[2].nodes = {};
  std::string text;
  for (const std::string& problem : validate_segments(graph, segments)) text += problem + "\n";
  EXPECT_THAT(text, HasSubstr("the ordering edge node 1 (op1) -> node 2 (op2) goes back from segment 1 to segment 0"));
  EXPECT_THAT(text, HasSubstr("segment 2 is empty"));
}

TEST_F(SegmentValidateRejects, KindsThatDoNotAlternate) {
  segments_[1].kind = G;
  EXPECT_THAT(problems(), HasSubstr("segments 0 and 1 are both graph segments"));
}

TEST_F(SegmentValidateRejects, ASegmentDuringAHostStepThatReadsIt) {
  // Segment 0 holds a, which the host step reads.
  segments_[0].during_next_host_step = true;
  EXPECT_THAT(problems(), HasSubstr("segment 0 runs during host step 1, which depends on it: the data edge "
                                    "node 0 (op0) -> node 2 (op2)"));
}

TEST_F(SegmentValidateRejects, ASegmentDuringAHostStepThatDoesNotCome) {
  segments_[2].during_next_host_step = true;
  EXPECT_THAT(problems(), HasSubstr("segment 2 runs during the next host step, and no host step follows it"));
}

TEST_F(SegmentValidateRejects, AMissingInput) {
  segments_[2].input_values = {out(graph_, 2)};  // lacks b's output
  EXPECT_THAT(problems(), HasSubstr("segment 2 lacks the input value %2 (output of node 1 (op1))"));
}

TEST_F(SegmentValidateRejects, AnInputNoEarlierSegmentOutputs) {
  segments_[0].output_values = {out(graph_, 0)};  // b's output is not passed on
  EXPECT_THAT(problems(),
              HasSubstr("segment 2 reads value %2 (output of node 1 (op1)), which no earlier segment outputs"));
}

TEST_F(SegmentValidateRejects, AValueOutputByTwoSegments) {
  segments_[1].output_values.push_back(out(graph_, 1));
  const std::string text = problems();
  EXPECT_THAT(text, HasSubstr("segment 1 lists the output value %2 (output of node 1 (op1)) it should not"));
  EXPECT_THAT(text, HasSubstr("segment 2 reads value %2 (output of node 1 (op1)), which segments 0 and 1 both output"));
}

TEST_F(SegmentValidateRejects, AModelOutputNobodyOutputs) {
  segments_[2].output_values.clear();
  const std::string text = problems();
  EXPECT_THAT(text, HasSubstr("model output value %5 (output of node 4 (op4)) is output by no segment"));
}

TEST_F(SegmentValidateRejects, ASegmentGraphOfAnotherShape) {
  segments_[2].graph = segments_[0].graph;
  EXPECT_THAT(problems(),
              HasSubstr("segment 2's graph has 2 nodes, 1 inputs and 2 outputs where the segment lists 2, 2 and 1"));
}

TEST_F(SegmentValidateRejects, ASegmentGraphThatIsNotACopy) {
  // Segment 2 is c = op3(h), d = op4(b, c) on the inputs (b, h).
  Graph other;
  const ValueId b = other.add_input("b");
  const ValueId h = other.add_input("h");
  const NodeId c = other.add_node("op9", {h}, {"Tensor"});
  other.add_output(other.node(other.add_node("op4", {b, other.node(c).outputs[0]}, {"Tensor"})).outputs[0]);
  segments_[2].graph = other;
  EXPECT_THAT(problems(), HasSubstr("segment 2's node 0 (op9) is not a copy of node 3 (op3)"));
}

TEST_F(SegmentValidateRejects, ASegmentGraphMissingAnEdge) {
  // d reads h where it should read c: no c -> d edge.
  Graph rebuilt;
  const ValueId b = rebuilt.add_input("b");
  const ValueId h = rebuilt.add_input("h");
  rebuilt.add_node("op3", {h}, {"Tensor"});
  rebuilt.add_output(rebuilt.node(rebuilt.add_node("op4", {b, h}, {"Tensor"})).outputs[0]);
  segments_[2].graph = rebuilt;
  const std::string text = problems();
  EXPECT_THAT(text, HasSubstr("segment 2's node 1 (op4) is not a copy of node 4 (op4)"));
  EXPECT_THAT(text, HasSubstr("segment 2's graph lacks the edge node 3 (op3) -> node 4 (op4)"));
}

// ---- running: equal to eager bit for bit ----------------------------------------------------

TEST(SegmentRun, RandomModelsWithRandomHostNodesMatchEager) {
  const IntraOpThreads one(1);
  std::vector<int> by_segments(6, 0);  // seeds by segment count, 5 and more counted together
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 random(seed);
    const int count = 5 + static_cast<int>(seed * 7919 % 56);
    Graph graph = random_model(count, seed);
    add_random_order_edges(graph, count / 5, random);
    at::manual_seed(seed);
    const std::vector<c10::IValue> inputs{at::randn({4, 6}), at::randn({4, 6})};
    const auto expected = flatten_tensors(EagerExecutor(graph).run(inputs));
    const double share = std::vector<double>{0, 0.05, 0.15, 0.3, 0.6, 1}[seed % 6];
    const HostOverlap overlap = seed % 2 == 0 ? HostOverlap::kSplit : HostOverlap::kNone;
    const auto segments = split_segments(graph, random_mask(graph.size(), share, random), overlap);
    ASSERT_THAT(validate_segments(graph, segments), IsEmpty()) << "seed " << seed;
    ++by_segments[std::min<std::size_t>(segments.size(), 5)];
    SegmentedModel model(graph, segments, seed * 100);
    for (int run = 0; run < 2; ++run) {
      ASSERT_TRUE(bitwise_equal(flatten_tensors(model.run(inputs)), expected))
          << "seed " << seed << ", " << count << " nodes, " << segments.size() << " segments, run " << run;
    }
  }
  // The masks cut most graphs: a host step with graph work on both sides, and more.
  EXPECT_GE(by_segments[3] + by_segments[4] + by_segments[5], 150);
}

// A node that synchronises with the host (aten::item): flagged, split off, and its scalar routed
// to the graph segment after it.
TEST(SegmentRun, AnItemNodeBecomesAHostStep) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId sum =
      graph.add_node("aten::sum", {x}, {"Tensor"}, kLaunchesKernel, unary([](const at::Tensor& t) { return t.sum(); }));
  const NodeId item = graph.add_node("aten::item", {out(graph, sum)}, {"Scalar"}, kNotCapturable,
                                     testing::op([](const std::vector<c10::IValue>& in) {
                                       return std::vector<c10::IValue>{in[0].toTensor().item()};
                                     }));
  const NodeId other =
      graph.add_node("aten::cos", {x}, {"Tensor"}, kLaunchesKernel, unary([](const at::Tensor& t) { return t.cos(); }));
  const NodeId scale = graph.add_node("aten::mul", {x, out(graph, item)}, {"Tensor"}, kLaunchesKernel,
                                      testing::op([](const std::vector<c10::IValue>& in) {
                                        return std::vector<c10::IValue>{in[0].toTensor() * in[1].toScalar()};
                                      }));
  graph.add_output(out(graph, scale));
  graph.add_output(out(graph, other));
  const auto segments = split_segments(graph, uncapturable_nodes(graph));
  ASSERT_THAT(node_lists(segments), ElementsAre(ElementsAre(sum, other), ElementsAre(item), ElementsAre(scale)));
  const IntraOpThreads one(1);
  const std::vector<c10::IValue> inputs{at::randn({3, 5})};
  SegmentedModel model(graph, segments, 1);
  EXPECT_TRUE(bitwise_equal(flatten_tensors(model.run(inputs)), flatten_tensors(EagerExecutor(graph).run(inputs))));
}

TEST(SegmentRun, ModelInputsReturnedAndReadLate) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const ValueId y = graph.add_input("y");
  const NodeId a =
      graph.add_node("test::a", {x}, {"Tensor"}, kLaunchesKernel, unary([](const at::Tensor& t) { return t * 2; }));
  const NodeId h = graph.add_node("test::h", {out(graph, a)}, {"Tensor"}, kLaunchesKernel,
                                  unary([](const at::Tensor& t) { return t.exp(); }));
  const NodeId c = graph.add_node("test::c", {out(graph, h), y}, {"Tensor"}, kLaunchesKernel,
                                  testing::binary([](const at::Tensor& p, const at::Tensor& q) { return p - q; }));
  graph.add_output(y);
  graph.add_output(out(graph, c));
  graph.add_output(x);
  graph.add_output(out(graph, a));
  const auto segments = split_segments(graph, mask(3, {h}));
  const std::vector<c10::IValue> inputs{at::randn({2, 2}), at::randn({2, 2})};
  SegmentedModel model(graph, segments, 1);
  const auto outputs = model.run(inputs);
  ASSERT_EQ(outputs.size(), 4u);
  EXPECT_TRUE(outputs[0].toTensor().is_same(inputs[1].toTensor()));
  EXPECT_TRUE(outputs[2].toTensor().is_same(inputs[0].toTensor()));
  EXPECT_TRUE(bitwise_equal(flatten_tensors(outputs), flatten_tensors(EagerExecutor(graph).run(inputs))));
}

TEST(SegmentRun, WrongInputCountAndAWrongRunnerAreErrors) {
  Graph graph = graph_from_edges(3, {{0, 1}, {1, 2}});
  graph.add_output(out(graph, 2));
  const auto segments = split_segments(graph, mask(3, {1}));
  const auto nothing = [](std::size_t, const std::vector<c10::IValue>&) { return std::vector<c10::IValue>{}; };
  EXPECT_THAT([&] { run_segments(graph, segments, {}, nothing); },
              ::testing::ThrowsMessage<Error>(HasSubstr("the model takes 1 inputs (x), 0 were given")));
  EXPECT_THAT([&] { run_segments(graph, segments, {at::ones({1})}, nothing); },
              ::testing::ThrowsMessage<Error>(HasSubstr("the runner of graph segment 0 returned 0 values")));
}

// Values are dropped after the last segment that reads them, so a long model does not keep every
// boundary value alive: the runner of the last segment sees only its own inputs referenced.
TEST(SegmentRun, BoundaryValuesAreDroppedAfterTheirLastReader) {
  Graph graph = graph_from_edges(3, {{0, 1}, {1, 2}});
  graph.add_output(out(graph, 2));
  const auto segments = split_segments(graph, mask(3, {1}));
  ASSERT_EQ(segments.size(), 3u);
  at::Tensor first_output;
  const auto runner = [&](std::size_t index, const std::vector<c10::IValue>& in) {
    if (index == 0) {
      first_output = at::ones({1});
      return std::vector<c10::IValue>{first_output};
    }
    if (index == 2) {
      EXPECT_EQ(first_output.use_count(), 1) << "segment 0's output is still held";
    }
    return std::vector<c10::IValue>{in[0].toTensor() + 1};
  };
  run_segments(graph, segments, {at::zeros({1})}, runner);
}

// ---- exported models ------------------------------------------------------------------------

struct ModelCase {
  std::string model;
  std::string extension;
  int masks;       // random host masks, after one of the uncapturable nodes alone
  int host_nodes;  // host nodes in each
  friend std::ostream& operator<<(std::ostream& stream, const ModelCase& c) {
    return stream << c.model << "." << c.extension;
  }
};

class SegmentModels : public ::testing::TestWithParam<ModelCase> {};

TEST_P(SegmentModels, RandomHostNodesMatchEager) {
  const ModelCase& c = GetParam();
  OPARA_REQUIRE_MODEL(c.model);
  const Graph graph = load(testing::model_path(c.model, c.extension));
  const std::vector<c10::IValue> inputs = testing::format_reference(c.model, c.extension).inputs;
  const IntraOpThreads one(1);
  const auto expected = flatten_tensors(EagerExecutor(graph).run(inputs));
  // The nodes the model itself cannot capture, then random ones on top.
  const std::vector<bool> uncapturable = uncapturable_nodes(graph);
  std::mt19937_64 random(17);
  std::uniform_int_distribution<NodeId> pick(0, static_cast<NodeId>(graph.size()) - 1);
  int cut = 0;  // masks giving a host step between two graph segments, or more
  for (int k = 0; k <= c.masks; ++k) {
    std::vector<bool> host = uncapturable;
    for (int n = 0; k > 0 && n < c.host_nodes; ++n) host[pick(random)] = true;
    const auto segments = split_segments(graph, host, k % 2 == 0 ? HostOverlap::kNone : HostOverlap::kSplit);
    ASSERT_THAT(validate_segments(graph, segments), IsEmpty()) << c << ", mask " << k;
    SegmentedModel model(graph, segments, 1 + k);
    if (segments.size() >= 3) ++cut;
    const auto outputs = flatten_tensors(model.run(inputs));
    EXPECT_TRUE(bitwise_equal(outputs, expected)) << c << ", mask " << k << ", " << segments.size()
                                                  << " segments: max |diff| " << max_abs_difference(outputs, expected);
  }
  EXPECT_GE(cut, c.masks / 2);
}

// The nodes each model cannot capture give a valid cut, in both formats (bert_base.pt has one:
// an aten::Int on a tensor, which SegmentModels runs as a host step).
TEST(SegmentModels, UncapturableNodesOfEveryModelGiveAValidCut) {
  const testing::ExportedModels models = testing::exported_models(testing::all_models());
  if (models.exported.empty()) GTEST_SKIP() << models.missing_text();
  for (const std::string& name : models.exported) {
    for (const char* extension : {"pt", "pt2"}) {
      const Graph graph = load(testing::model_path(name, extension));
      const auto host = uncapturable_nodes(graph);
      const auto segments = split_segments(graph, host);
      EXPECT_THAT(validate_segments(graph, segments), IsEmpty()) << name << "." << extension;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Segment, SegmentModels,
                         ::testing::Values(ModelCase{"inplace", "pt", 40, 3}, ModelCase{"inplace", "pt2", 40, 3},
                                           ModelCase{"googlenet", "pt", 3, 4}, ModelCase{"googlenet", "pt2", 2, 4},
                                           ModelCase{"bert_base", "pt", 1, 4}),
                         [](const auto& info) { return info.param.model + "_" + info.param.extension; });

}  // namespace
}  // namespace opara
