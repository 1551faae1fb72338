// Split nodes: a pooling or activation node cut along batch or channels, its pieces run on their
// own slices and placed into one output, has the bits of the whole node; the executor splits
// long ones among idle workers and still equals eager.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "exec/eager_executor.h"
#include "exec/outputs.h"
#include "exported_models.h"
#include "model_files.h"
#include "opara/error.h"
#include "opara/load.h"
#include "random_models.h"
#include "runtime/cpu/cpu_parallel_executor.h"
#include "runtime/cpu/node_split.h"
#include "schedule/stages.h"

namespace opara {
namespace {

// Runs every piece of `split` in turn and returns the gathered output.
at::Tensor run_pieces(const Graph& graph, NodeId id, const std::vector<c10::IValue>& inputs, const NodeSplit& split) {
  SplitOutput output(split);
  for (int piece = 0; piece < split.pieces(); ++piece) output.run_piece(graph, id, *graph.node(id).op, inputs, piece);
  return output.take();
}

Graph one_node(const std::string& kind, std::function<at::Tensor(const at::Tensor&)> f) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId node = graph.add_node(kind, {x}, {"Tensor"}, kLaunchesKernel, testing::unary(std::move(f)));
  graph.add_output(graph.node(node).outputs[0]);
  return graph;
}

// The executor splits only on workers of one intra-op thread; the whole node runs so too.
class OneThread {
 public:
  OneThread() : previous_(at::get_num_threads()) { at::set_num_threads(1); }
  ~OneThread() { at::set_num_threads(previous_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int previous_;
};

TEST(NodeSplit, EveryPoolingAndActivationOfBranchyAndGoogLeNetKeepsItsBits) {
  const OneThread one_thread;
  const testing::ExportedModels models = testing::exported_models({"branchy", "googlenet"});
  if (models.exported.empty()) GTEST_SKIP() << models.missing_text();
  int checked = 0;
  for (const std::string& name : models.exported) {
    const Graph graph = load(testing::model_path(name, "pt"));
    const auto reference = testing::format_reference(name, "pt");
    EagerExecutor eager(graph, c10::kCPU);
    eager.set_observer([&](NodeId id, const std::vector<c10::IValue>& inputs, const std::vector<c10::IValue>& outputs) {
      for (int pieces : {2, 3, 4}) {
        const std::optional<NodeSplit> split = split_node(graph, id, inputs, pieces);
        if (!split) continue;
        ++checked;
        EXPECT_LE(split->pieces(), pieces);
        const at::Tensor whole = outputs.at(0).toTensor();
        EXPECT_TRUE(at::equal(run_pieces(graph, id, inputs, *split), whole)) << graph.describe(id) << " in " << pieces;
      }
    });
    eager.run(reference.inputs);
  }
  EXPECT_GT(checked, 10);
}

// Every kind the op table lets split, on sizes whose cuts fall inside rows and leave odd tails.
TEST(NodeSplit, EverySplittingKindKeepsItsBitsOnOddSizes) {
  const OneThread one_thread;
  using Op = std::function<at::Tensor(const at::Tensor&)>;
  const std::vector<std::pair<std::string, Op>> kinds{
      {"aten::avg_pool2d",
       [](const at::Tensor& t) {
         return at::avg_pool2d(t, {3, 3}, {1, 1}, {1, 1});
       }},
      {"aten::max_pool2d",
       [](const at::Tensor& t) {
         return at::max_pool2d(t, {3, 3}, {2, 2}, {1, 1});
       }},
      {"aten::adaptive_avg_pool2d",
       [](const at::Tensor& t) {
         return at::adaptive_avg_pool2d(t, {2, 3});
       }},
      {"aten::sigmoid", [](const at::Tensor& t) { return t.sigmoid(); }},
      {"aten::tanh", [](const at::Tensor& t) { return t.tanh(); }},
      {"aten::gelu", [](const at::Tensor& t) { return at::gelu(t); }},
      {"aten::silu", [](const at::Tensor& t) { return at::silu(t); }},
      {"aten::hardswish", [](const at::Tensor& t) { return at::hardswish(t); }},
      {"aten::hardsigmoid", [](const at::Tensor& t) { return at::hardsigmoid(t); }},
      {"aten::elu", [](const at::Tensor& t) { return at::elu(t); }},
      {"aten::exp", [](const at::Tensor& t) { return t.exp(); }},
  };
  int split_cases = 0;
  for (const auto& [kind, op] : kinds) {
    const Graph graph = one_node(kind, op);
    for (const std::vector<std::int64_t>& sizes :
         std::vector<std::vector<std::int64_t>>{{3, 17, 9, 11}, {1, 130, 7, 5}, {1, 64, 8, 8}, {2, 5, 33, 3}}) {
      const at::Tensor x = at::randn(sizes) * 4;
      const std::vector<c10::IValue> inputs{x};
      for (int pieces : {2, 3}) {
        const std::optional<NodeSplit> split = split_node(graph, 0, inputs, pieces);
        if (!split) continue;
        ++split_cases;
        EXPECT_TRUE(at::equal(run_pieces(graph, 0, inputs, *split), op(x)))
            << kind << " " << x.sizes() << " in " << pieces;
      }
    }
  }
  EXPECT_GT(split_cases, 40);
  // 1-d pooling cuts batch or channels, never the row.
  const Graph pool1d =
      one_node("aten::max_pool1d", [](const at::Tensor& t) { return at::max_pool1d(t, {3}, {1}, {1}); });
  const std::vector<c10::IValue> batched{at::randn({1, 128, 50})};
  const std::optional<NodeSplit> split = split_node(pool1d, 0, batched, 2);
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->dim, 1);
  EXPECT_TRUE(at::equal(run_pieces(pool1d, 0, batched, *split), at::max_pool1d(batched[0].toTensor(), {3}, {1}, {1})));
}

// An unbatched [C, H, W] pooling input: channels may be cut, a plane's rows never (padding would
// take the place of the neighbouring rows).
TEST(NodeSplit, UnbatchedPoolingCutsChannelsNeverRows) {
  const Graph pool = one_node("aten::max_pool2d", [](const at::Tensor& t) {
    return at::max_pool2d(t, {3, 3}, {1, 1}, {1, 1});
  });
  EXPECT_FALSE(split_node(pool, 0, {at::randn({1, 64, 64})}, 2).has_value()) << "one channel: dimension 1 is rows";
  const std::vector<c10::IValue> channels{at::randn({64, 16, 16})};
  const std::optional<NodeSplit> split = split_node(pool, 0, channels, 2);
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->dim, 0);
  EXPECT_TRUE(
      at::equal(run_pieces(pool, 0, channels, *split), at::max_pool2d(channels[0].toTensor(), {3, 3}, {1, 1}, {1, 1})));
  EXPECT_FALSE(split_node(pool, 0, {at::randn({1, 8, 8}).to(at::kInt)}, 2).has_value()) << "not floating point";
}

TEST(NodeSplit, CutsFallOn64ElementBoundariesSoVectorLoopsSeeTheSameChunks) {
  const OneThread one_thread;
  const Graph graph = one_node("aten::sigmoid", [](const at::Tensor& t) { return t.sigmoid(); });
  for (const std::vector<std::int64_t>& sizes :
       std::vector<std::vector<std::int64_t>>{{1, 7, 5, 3}, {3, 17, 9}, {1, 1000}, {5, 33}, {1, 130, 1, 1}}) {
    const at::Tensor x = at::randn(sizes, at::TensorOptions().dtype(at::kFloat)) * 8;
    const std::vector<c10::IValue> inputs{x};
    const std::optional<NodeSplit> split = split_node(graph, 0, inputs, 4);
    if (!split) continue;
    const std::int64_t per_index = x.numel() / x.size(split->dim);
    for (std::int64_t bound : split->bounds)
      EXPECT_EQ(bound * per_index % 64, bound == x.size(split->dim) ? bound * per_index % 64 : 0);
    EXPECT_TRUE(at::equal(run_pieces(graph, 0, inputs, *split), x.sigmoid())) << x.sizes();
  }
  // [1, 2, 3]: no cut of 3 elements falls on a 64-element boundary.
  EXPECT_FALSE(split_node(graph, 0, {at::randn({1, 2, 3})}, 2).has_value());
}

TEST(NodeSplit, OnlyPlaneWiseKindsOnOneContiguousTensorSplit) {
  const at::Tensor x = at::randn({4, 64, 8, 8});
  const Graph sigmoid = one_node("aten::sigmoid", [](const at::Tensor& t) { return t.sigmoid(); });
  EXPECT_TRUE(split_node(sigmoid, 0, {x}, 2).has_value());
  EXPECT_EQ(split_node(sigmoid, 0, {x}, 2)->dim, 0) << "the batch first";
  EXPECT_EQ(split_node(sigmoid, 0, {at::randn({1, 64, 8, 8})}, 2)->dim, 1) << "channels when the batch is 1";
  EXPECT_FALSE(split_node(sigmoid, 0, {x.transpose(2, 3)}, 2).has_value()) << "not contiguous";
  EXPECT_FALSE(split_node(sigmoid, 0, {x}, 1).has_value()) << "one piece is no split";
  // Mixes channels: softmax over dim 1 is not plane-wise; nor is an in-place form.
  const Graph softmax = one_node("aten::softmax", [](const at::Tensor& t) { return t.softmax(1); });
  EXPECT_FALSE(split_node(softmax, 0, {x}, 2).has_value());
  const Graph in_place = one_node("aten::sigmoid_", [](const at::Tensor& t) { return t.sigmoid_(); });
  EXPECT_FALSE(split_node(in_place, 0, {x}, 2).has_value());
}

TEST(NodeSplit, APieceThatFailsIsNamed) {
  const Graph graph = one_node("aten::sigmoid", [](const at::Tensor& t) -> at::Tensor {
    if (t.size(1) < 64) throw std::runtime_error("a piece refused");
    return t.sigmoid();
  });
  const std::vector<c10::IValue> inputs{at::randn({1, 64, 8, 8})};
  const std::optional<NodeSplit> split = split_node(graph, 0, inputs, 2);
  ASSERT_TRUE(split.has_value());
  SplitOutput output(*split);
  EXPECT_THROW(output.run_piece(graph, 0, *graph.node(0).op, inputs, 0), NodeError);
}

// A long plane-wise node while another worker idles: they share it, the output is eager's, and
// the first run (which measures) never splits.
TEST(NodeSplit, TheExecutorSplitsALongNodeAmongIdleWorkersWithEagersBits) {
  if (usable_cores() < 2) GTEST_SKIP() << "one usable CPU: no worker is ever idle";
  Graph graph;
  const ValueId x = graph.add_input("x");
  const ValueId small = graph.add_input("small");
  const NodeId relu = graph.add_node("aten::relu", {x}, {"Tensor"}, kLaunchesKernel,
                                     testing::unary([](const at::Tensor& t) { return t.relu(); }));
  const NodeId pool = graph.add_node("aten::avg_pool2d", {graph.node(relu).outputs[0]}, {"Tensor"}, kLaunchesKernel,
                                     testing::unary([](const at::Tensor& t) {
                                       return at::avg_pool2d(t, {3, 3}, {1, 1}, {1, 1});
                                     }));
  const NodeId side = graph.add_node("aten::tanh", {small}, {"Tensor"}, kLaunchesKernel,
                                     testing::unary([](const at::Tensor& t) { return t.tanh(); }));
  graph.add_output(graph.node(pool).outputs[0]);
  graph.add_output(graph.node(side).outputs[0]);
  const std::vector<c10::IValue> inputs{at::randn({1, 64, 96, 96}), at::randn({4})};
  const std::vector<c10::IValue> expected = EagerExecutor(graph, c10::kCPU).run(inputs);

  CpuExecutorOptions options;
  options.cpu.split_min_us = 1;  // any run long enough to time
  // One stream and two workers: the second has nothing of its own, so it is idle for every node.
  const Plan one_stream = make_plan(graph, {StreamPolicy::kSingle, OrderPolicy::kTopological});
  options.workers = 2;
  options.cpu.intra_op_threads = 1;
  options.jitter_seed = 7;
  CpuParallelExecutor executor(graph, one_stream, options);
  EXPECT_TRUE(bitwise_equal(flatten_tensors(executor.run(inputs)), flatten_tensors(expected)));
  EXPECT_EQ(executor.split_runs(), 0u) << "the first run only measures";
  for (int run = 0; run < 20; ++run) {
    EXPECT_TRUE(bitwise_equal(flatten_tensors(executor.run(inputs)), flatten_tensors(expected))) << "run " << run;
  }
  EXPECT_GT(executor.split_runs(), 0u);

  options.cpu.split_min_us = 0;
  CpuParallelExecutor never(graph, one_stream, options);
  for (int run = 0; run < 3; ++run) never.run(inputs);
  EXPECT_EQ(never.split_runs(), 0u);
}

}  // namespace
}  // namespace opara
