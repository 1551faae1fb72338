// The CPU parallel executor runs a Plan with one host thread per stream and equals the eager
// reference bit for bit: on graphs written inline with hand-made plans, on hundreds of random
// graphs under random plans and thread jitter, and on exported models. It names the node that
// fails, stays usable after a failure, and rejects plans that validate() rejects.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "exec/eager_executor.h"
#include "exec/outputs.h"
#include "graph/graph_analysis.h"
#include "model_files.h"
#include "opara/error.h"
#include "opara/load.h"
#include "opara/plan.h"
#include "plan_fixtures.h"
#include "random_models.h"
#include "runtime/cpu/cpu_parallel_executor.h"
#include "runtime/cpu/worker_affinity.h"
#include "tools/model_inputs.h"

namespace opara {
namespace {

using testing::binary;
using ::testing::HasSubstr;
using testing::kExecutedPolicies;
using testing::op;
using testing::random_costs;
using testing::random_model;
using testing::unary;

// The executor's options as these tests give them, by position: intra-op threads, jitter seed,
// workers, priorities.
CpuExecutorOptions executor_options(int threads, std::uint64_t jitter = 0, int workers = 0,
                                    std::vector<double> priorities = {}) {
  CpuExecutorOptions options;
  options.cpu.intra_op_threads = threads;
  options.jitter_seed = jitter;
  options.workers = workers;
  options.priorities = std::move(priorities);
  return options;
}

// ---- plans written by hand ------------------------------------------------------------------

// The kernel nodes `id` depends on, looking through nodes without a stream.
std::set<NodeId> kernel_dependencies(const Graph& graph, const std::vector<int>& stream_of, NodeId id) {
  std::set<NodeId> found;
  std::vector<NodeId> todo(graph.node(id).predecessors);
  std::set<NodeId> seen(todo.begin(), todo.end());
  while (!todo.empty()) {
    const NodeId node = todo.back();
    todo.pop_back();
    if (stream_of[node] != kNoStream) {
      found.insert(node);
      continue;
    }
    for (NodeId predecessor : graph.node(node).predecessors) {
      if (seen.insert(predecessor).second) todo.push_back(predecessor);
    }
  }
  return found;
}

// A plan with the given streams and launch order and one wait per cross-stream dependency
// (unreduced: more waits than make_plan's, equally correct).
Plan plan_with(const Graph& graph, std::vector<int> stream_of, std::vector<NodeId> launch_order) {
  Plan plan;
  plan.cost_source = "none";
  plan.stream_count = 0;
  for (int stream : stream_of) plan.stream_count = std::max(plan.stream_count, stream + 1);
  plan.waits.assign(graph.size(), {});
  plan.records.assign(graph.size(), 0);
  for (const Node& node : graph.nodes()) {
    if (stream_of[node.id] == kNoStream) continue;
    for (NodeId dependency : kernel_dependencies(graph, stream_of, node.id)) {
      if (stream_of[dependency] == stream_of[node.id]) continue;
      plan.waits[node.id].push_back(dependency);
      plan.records[dependency] = 1;
      ++plan.events_unreduced;
    }
  }
  plan.stream_of = std::move(stream_of);
  plan.launch_order = std::move(launch_order);
  return plan;
}

// Kernel nodes on `streams` streams at random (each stream used at least once when there are
// enough kernel nodes), nodes without a kernel on none, in a random topological order.
Plan random_plan(const Graph& graph, int streams, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<int> stream_of(graph.size(), kNoStream);
  int next = 0;
  for (const Node& node : graph.nodes()) {
    if (!node.has(kLaunchesKernel)) continue;
    stream_of[node.id] = next < streams ? next++ : std::uniform_int_distribution<int>(0, streams - 1)(random);
  }
  return plan_with(graph, std::move(stream_of), random_topological_order(graph, seed));
}

std::vector<at::Tensor> eager_outputs(const Graph& graph, const std::vector<c10::IValue>& inputs) {
  EagerExecutor eager(graph);
  return flatten_tensors(eager.run(inputs));
}

// The reference with `threads` intra-op threads on this thread, as a worker would have them.
std::vector<at::Tensor> eager_outputs(const Graph& graph, const std::vector<c10::IValue>& inputs, int threads) {
  const int previous = at::get_num_threads();
  at::set_num_threads(threads);
  try {
    auto outputs = eager_outputs(graph, inputs);
    at::set_num_threads(previous);
    return outputs;
  } catch (...) {
    at::set_num_threads(previous);
    throw;
  }
}

// ---- graphs written inline ------------------------------------------------------------------

// x -> a = x/2 + 1            (stream 0)
//   -> b = sin(x)             (stream 1)
// a -> v = a.view(-1)         (no kernel)
// a, b -> c = a/2 + sin(b)    (stream 0, waits on b)
// v, b -> d = v * b.view(-1)  (stream 1, waits on a: through the view)
// c, d -> e = c + d.view_as(c) (stream 2, waits on c and d)
Graph diamond_with_view() {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId a = graph.add_node("test::affine", {x}, {"Tensor"}, kLaunchesKernel,
                                  unary([](const at::Tensor& t) { return t * 0.5 + 1; }));
  const NodeId b =
      graph.add_node("test::sin", {x}, {"Tensor"}, kLaunchesKernel, unary([](const at::Tensor& t) { return t.sin(); }));
  const ValueId va = graph.node(a).outputs[0];
  const ValueId vb = graph.node(b).outputs[0];
  const NodeId v =
      graph.add_node("aten::view", {va}, {"Tensor"}, kView, unary([](const at::Tensor& t) { return t.view(-1); }));
  const NodeId c = graph.add_node("test::mix", {va, vb}, {"Tensor"}, kLaunchesKernel,
                                  binary([](const at::Tensor& p, const at::Tensor& q) { return p * 0.5 + q.sin(); }));
  const NodeId d = graph.add_node("test::mul", {graph.node(v).outputs[0], vb}, {"Tensor"}, kLaunchesKernel,
                                  binary([](const at::Tensor& p, const at::Tensor& q) { return p * q.reshape(-1); }));
  const NodeId e =
      graph.add_node("test::add", {graph.node(c).outputs[0], graph.node(d).outputs[0]}, {"Tensor"}, kLaunchesKernel,
                     binary([](const at::Tensor& p, const at::Tensor& q) { return p + q.view_as(p); }));
  graph.add_output(graph.node(e).outputs[0]);
  graph.add_output(graph.node(v).outputs[0]);
  return graph;
}

TEST(CpuParallelExecutor, HandWrittenPlanMatchesEager) {
  const Graph graph = diamond_with_view();
  Plan plan;
  plan.cost_source = "none";
  plan.stream_count = 3;
  plan.stream_of = {0, 1, kNoStream, 0, 1, 2};
  plan.launch_order = {0, 1, 2, 3, 4, 5};
  plan.waits = {{}, {}, {}, {1}, {0}, {3, 4}};
  plan.records = {1, 1, 0, 1, 1, 0};
  plan.events_unreduced = 4;
  const std::vector<c10::IValue> inputs{at::randn({4, 6})};
  const auto expected = eager_outputs(graph, inputs);
  for (std::uint64_t jitter = 0; jitter < 50; ++jitter) {
    CpuParallelExecutor executor(graph, plan, executor_options(1, jitter));
    EXPECT_TRUE(bitwise_equal(flatten_tensors(executor.run(inputs)), expected)) << "jitter seed " << jitter;
  }
}

TEST(CpuParallelExecutor, EveryPolicyMatchesEager) {
  const Graph graph = diamond_with_view();
  const std::vector<c10::IValue> inputs{at::randn({4, 6})};
  const auto expected = eager_outputs(graph, inputs);
  std::uint64_t jitter = 1;
  for (const auto& [streams, order] : kExecutedPolicies) {
    for (int cap : {0, 1, 2}) {
      const Plan plan = make_plan(graph, PlanOptions{streams, order, cap}, random_costs(graph, jitter));
      for (int k = 0; k < 5; ++k, ++jitter) {
        CpuParallelExecutor executor(graph, plan, executor_options(1, jitter));
        EXPECT_TRUE(bitwise_equal(flatten_tensors(executor.run(inputs)), expected))
            << to_string(streams) << "/" << to_string(order) << " cap " << cap << ", jitter seed " << jitter;
      }
    }
  }
}

TEST(CpuParallelExecutor, RepeatedRunsAgreeAndFollowTheInputs) {
  const Graph graph = diamond_with_view();
  CpuParallelExecutor executor(graph, plan_with(graph, {0, 1, kNoStream, 0, 1, 2}, {0, 1, 2, 3, 4, 5}),
                               executor_options(1, 7));
  for (int run = 0; run < 20; ++run) {
    const std::vector<c10::IValue> inputs{at::randn({4, 6})};
    EXPECT_TRUE(bitwise_equal(flatten_tensors(executor.run(inputs)), eager_outputs(graph, inputs)));
  }
}

// Nodes without a stream run once per run, whoever needs them first.
TEST(CpuParallelExecutor, NodesWithoutAStreamRunOncePerRun) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId a = graph.add_node("test::affine", {x}, {"Tensor"}, kLaunchesKernel,
                                  unary([](const at::Tensor& t) { return t * 0.5 + 1; }));
  const NodeId view =
      graph.add_node("aten::view", {graph.node(a).outputs[0]}, {"Tensor"}, kView, unary([calls](const at::Tensor& t) {
                       ++*calls;
                       return t.view(-1);
                     }));
  const NodeId view2 =
      graph.add_node("aten::t", {graph.node(view).outputs[0]}, {"Tensor"}, kView, unary([calls](const at::Tensor& t) {
                       ++*calls;
                       return t.view({1, -1});
                     }));
  const ValueId shared = graph.node(view2).outputs[0];
  std::vector<ValueId> consumers;
  for (int k = 0; k < 6; ++k) {
    const NodeId consumer = graph.add_node("test::scale", {shared}, {"Tensor"}, kLaunchesKernel,
                                           unary([k](const at::Tensor& t) { return t * (k + 1); }));
    consumers.push_back(graph.node(consumer).outputs[0]);
  }
  // An unused view: it still runs, once, after the workers.
  graph.add_node("aten::view", {x}, {"Tensor"}, kView, unary([calls](const at::Tensor& t) {
                   ++*calls;
                   return t.view(-1);
                 }));
  for (ValueId consumer : consumers) graph.add_output(consumer);
  const std::vector<c10::IValue> inputs{at::randn({3, 5})};
  const auto expected = eager_outputs(graph, inputs);
  ASSERT_EQ(calls->load(), 3);
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    CpuParallelExecutor executor(graph, random_plan(graph, 3, seed), executor_options(1, seed));
    for (int run = 0; run < 3; ++run) {
      calls->store(0);
      EXPECT_TRUE(bitwise_equal(flatten_tensors(executor.run(inputs)), expected));
      EXPECT_EQ(calls->load(), 3) << "seed " << seed;
    }
  }
}

TEST(CpuParallelExecutor, GraphWithoutKernelsRunsOnTheCaller) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId view =
      graph.add_node("aten::view", {x}, {"Tensor"}, kView, unary([](const at::Tensor& t) { return t.view(-1); }));
  graph.add_output(graph.node(view).outputs[0]);
  graph.add_output(x);
  const std::vector<c10::IValue> inputs{at::randn({2, 3})};
  CpuParallelExecutor executor(graph, plan_with(graph, {kNoStream}, {0}));
  EXPECT_EQ(executor.plan().stream_count, 0);
  EXPECT_TRUE(bitwise_equal(flatten_tensors(executor.run(inputs)), eager_outputs(graph, inputs)));
}

// ---- errors ---------------------------------------------------------------------------------

// x -> a (stream 0) -> boom (stream 1) -> c (stream 0, waits on boom) ; d (stream 2) on x.
Graph graph_with_a_failing_node(std::shared_ptr<std::atomic<bool>> fail, std::uint32_t boom_flags) {
  Graph graph;
  graph.source_path = "hand_made.pt";
  const ValueId x = graph.add_input("x");
  const NodeId a = graph.add_node("test::affine", {x}, {"Tensor"}, kLaunchesKernel,
                                  unary([](const at::Tensor& t) { return t * 0.5 + 1; }));
  const NodeId boom = graph.add_node("test::boom", {graph.node(a).outputs[0]}, {"Tensor"}, boom_flags,
                                     unary([fail](const at::Tensor& t) {
                                       TORCH_CHECK(!*fail, "boom went off\nsecond line of the message");
                                       return t.cos();
                                     }));
  graph.set_source(boom, "model.py:42", "");
  const NodeId c =
      graph.add_node("test::mix", {graph.node(a).outputs[0], graph.node(boom).outputs[0]}, {"Tensor"}, kLaunchesKernel,
                     binary([](const at::Tensor& p, const at::Tensor& q) { return p * 0.5 + q.sin(); }));
  const NodeId d =
      graph.add_node("test::sin", {x}, {"Tensor"}, kLaunchesKernel, unary([](const at::Tensor& t) { return t.sin(); }));
  graph.add_output(graph.node(c).outputs[0]);
  graph.add_output(graph.node(d).outputs[0]);
  return graph;
}

TEST(CpuParallelExecutor, AFailingNodeIsNamedAndTheNextRunWorks) {
  for (const std::uint32_t boom_flags : {std::uint32_t{kLaunchesKernel}, std::uint32_t{kView}}) {
    auto fail = std::make_shared<std::atomic<bool>>(false);
    const Graph graph = graph_with_a_failing_node(fail, boom_flags);
    const bool kernel = boom_flags == kLaunchesKernel;
    const std::vector<c10::IValue> inputs{at::randn({4, 6})};
    const auto expected = eager_outputs(graph, inputs);
    for (std::uint64_t jitter = 0; jitter < 20; ++jitter) {
      CpuParallelExecutor executor(graph, plan_with(graph, {0, kernel ? 1 : kNoStream, 0, 2}, {0, 1, 2, 3}),
                                   executor_options(1, jitter));
      fail->store(true);
      try {
        executor.run(inputs);
        ADD_FAILURE() << "no error from a failing node";
      } catch (const Error& error) {
        EXPECT_THAT(error.what(), HasSubstr("hand_made.pt: node 1 (test::boom at model.py:42) failed: boom went off"));
        EXPECT_THAT(error.what(), ::testing::Not(HasSubstr("second line")));
      }
      fail->store(false);
      EXPECT_TRUE(bitwise_equal(flatten_tensors(executor.run(inputs)), expected));
    }
  }
}

TEST(CpuParallelExecutor, WrongInputCountIsTheEagerMessage) {
  const Graph graph = diamond_with_view();
  CpuParallelExecutor executor(graph, plan_with(graph, {0, 1, kNoStream, 0, 1, 2}, {0, 1, 2, 3, 4, 5}));
  EXPECT_THROW(executor.run({}), Error);
  try {
    executor.run({at::randn({4, 6}), at::randn({4, 6})});
    FAIL() << "no error for an extra input";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("the model takes 1 inputs (x), 2 were given"));
  }
  const std::vector<c10::IValue> inputs{at::randn({4, 6})};
  EXPECT_TRUE(bitwise_equal(flatten_tensors(executor.run(inputs)), eager_outputs(graph, inputs)));
}

TEST(CpuParallelExecutor, RejectsAnInvalidPlan) {
  const Graph graph = diamond_with_view();
  // d (stream 1) reads a (stream 0) through the view without waiting on it.
  Plan plan = plan_with(graph, {0, 1, kNoStream, 0, 1, 2}, {0, 1, 2, 3, 4, 5});
  plan.waits[4].clear();
  EXPECT_THROW((CpuParallelExecutor{graph, plan}), Error);
  // A launch order that is not topological.
  plan = plan_with(graph, {0, 1, kNoStream, 0, 1, 2}, {0, 1, 2, 3, 5, 4});
  EXPECT_THROW((CpuParallelExecutor{graph, plan}), Error);
}

TEST(CpuParallelExecutor, NegativeIntraOpThreadsAreRejected) {
  const Graph graph = diamond_with_view();
  EXPECT_THROW(CpuParallelExecutor(graph, plan_with(graph, {0, 1, kNoStream, 0, 1, 2}, {0, 1, 2, 3, 4, 5}),
                                   executor_options(-1, 0)),
               Error);
}

TEST(CpuParallelExecutor, WorkersDefaultToStreamsCappedByCoresAndAnyCountGivesTheSameOutputs) {
  const Graph graph = diamond_with_view();
  const Plan plan = plan_with(graph, {0, 1, kNoStream, 0, 1, 2}, {0, 1, 2, 3, 4, 5});
  const std::vector<c10::IValue> inputs{at::randn({3, 4})};
  const auto expected = eager_outputs(graph, inputs);
  const int cores = usable_cores();
  CpuParallelExecutor automatic(graph, plan);
  EXPECT_EQ(automatic.workers(), std::min(3, std::max(cores, 1)));
  for (int workers : {1, 2, 5}) {
    CpuParallelExecutor executor(graph, plan, executor_options(1, 7, workers));
    EXPECT_EQ(executor.workers(), workers);
    EXPECT_TRUE(bitwise_equal(flatten_tensors(executor.run(inputs)), expected)) << workers << " workers";
  }
  EXPECT_THROW(CpuParallelExecutor(graph, plan, executor_options(1, 0, -2)), Error);
}

TEST(CpuParallelExecutor, PrioritiesPickWhichReadyStreamRunsFirst) {
  // Two independent nodes on two streams, one worker: the higher priority runs first.
  auto order = std::make_shared<std::vector<int>>();
  auto mutex = std::make_shared<std::mutex>();
  Graph graph;
  const ValueId x = graph.add_input("x");
  for (int k = 0; k < 2; ++k) {
    const NodeId node =
        graph.add_node("test::log", {x}, {"Tensor"}, kLaunchesKernel, unary([order, mutex, k](const at::Tensor& t) {
                         std::lock_guard<std::mutex> lock(*mutex);
                         order->push_back(k);
                         return t + k;
                       }));
    graph.add_output(graph.node(node).outputs[0]);
  }
  const Plan plan = plan_with(graph, {0, 1}, {0, 1});
  for (const auto& [priorities, first] : {std::pair{std::vector<double>{1, 2}, 1}, {std::vector<double>{2, 1}, 0}}) {
    order->clear();
    CpuParallelExecutor executor(graph, plan, executor_options(1, 0, 1, priorities));
    executor.run({at::ones({2})});
    ASSERT_EQ(order->size(), 2u);
    EXPECT_EQ(order->front(), first);
  }
  EXPECT_THROW(CpuParallelExecutor(graph, plan, executor_options(1, 0, 1, {1.0})), Error);

  // Priorities set between runs decide the next run's order, as given ones do.
  CpuParallelExecutor executor(graph, plan, executor_options(1, 0, 1, {2, 1}));
  executor.set_priorities({1, 2});
  EXPECT_EQ(executor.priorities(), (std::vector<double>{1, 2}));
  order->clear();
  executor.run({at::ones({2})});
  ASSERT_EQ(order->size(), 2u);
  EXPECT_EQ(order->front(), 1);
  EXPECT_THAT(
      [&] {
        executor.set_priorities({1, 2, 3});
      },
      ::testing::ThrowsMessage<Error>(::testing::HasSubstr("3 node priorities given for a graph of 2 nodes")));
}

TEST(CpuParallelExecutor, NodeTimesAreTheLastRunsPerNode) {
  // A node that sleeps 2 ms and one that does not: the times say which is which.
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId slow = graph.add_node("test::slow", {x}, {"Tensor"}, kLaunchesKernel, unary([](const at::Tensor& t) {
                                       std::this_thread::sleep_for(std::chrono::milliseconds(2));
                                       return t + 1;
                                     }));
  const NodeId quick =
      graph.add_node("test::quick", {x}, {"Tensor"}, kLaunchesKernel, unary([](const at::Tensor& t) { return t + 2; }));
  graph.add_output(graph.node(slow).outputs[0]);
  graph.add_output(graph.node(quick).outputs[0]);
  CpuParallelExecutor executor(graph, plan_with(graph, {0, 1}, {0, 1}), executor_options(1, 0, 2));
  executor.run({at::ones({2})});
  EXPECT_EQ(executor.node_times(), (std::vector<double>{0, 0})) << "not recorded unless asked";
  executor.record_node_times(true);
  executor.run({at::ones({2})});
  executor.record_node_times(false);
  const std::vector<double> times = executor.node_times();
  ASSERT_EQ(times.size(), 2u);
  EXPECT_GE(times[slow], 2000);
  EXPECT_GT(times[quick], 0);
  EXPECT_LT(times[quick], times[slow]);
}

TEST(CpuParallelExecutor, CriticalPathPrioritiesPutTheLongestRemainingPathFirst) {
  // x -> slow (2 ms) -> slow_too (2 ms) -> out; x -> quick -> out: the slow chain's head comes first.
  const auto sleeping = [](int milliseconds) {
    return unary([milliseconds](const at::Tensor& t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
      return t + 1;
    });
  };
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId slow = graph.add_node("test::slow", {x}, {"Tensor"}, kLaunchesKernel, sleeping(2));
  const NodeId slow_too =
      graph.add_node("test::slow", {graph.node(slow).outputs[0]}, {"Tensor"}, kLaunchesKernel, sleeping(2));
  const NodeId quick = graph.add_node("test::quick", {x}, {"Tensor"}, kLaunchesKernel, sleeping(0));
  const NodeId out =
      graph.add_node("test::add", {graph.node(slow_too).outputs[0], graph.node(quick).outputs[0]}, {"Tensor"},
                     kLaunchesKernel, binary([](const at::Tensor& p, const at::Tensor& q) { return p + q; }));
  graph.add_output(graph.node(out).outputs[0]);
  const std::vector<double> priorities = critical_path_priorities(graph, {at::ones({2})});
  ASSERT_EQ(priorities.size(), graph.size());
  EXPECT_GT(priorities[slow], priorities[quick] + 0.003) << "two 2 ms nodes remain after slow";
  EXPECT_GT(priorities[slow_too], 0.002);
  for (const Node& node : graph.nodes()) {
    EXPECT_GT(priorities[node.id], 0);
    for (NodeId next : node.successors) EXPECT_GT(priorities[node.id], priorities[next]) << "remaining time shrinks";
  }
}

TEST(CpuParallelExecutor, RefusesASecondRunWhileOneIsInProgress) {
  // The first run blocks inside a node until the second call has been refused.
  std::promise<void> entered;
  std::promise<void> refused;
  auto refused_future = refused.get_future().share();
  Graph graph;
  const ValueId x = graph.add_input("x");
  const NodeId node = graph.add_node("test::block", {x}, {"Tensor"}, kLaunchesKernel,
                                     unary([&entered, refused_future](const at::Tensor& t) {
                                       entered.set_value();
                                       refused_future.wait();
                                       return t + 1;
                                     }));
  graph.add_output(graph.node(node).outputs[0]);
  CpuParallelExecutor executor(graph, plan_with(graph, {0}, {0}), executor_options(1, 0, 1));
  std::thread first([&] { executor.run({at::ones({2})}); });
  entered.get_future().wait();
  EXPECT_THAT([&] { executor.run({at::ones({2})}); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("another run is in progress")));
  refused.set_value();
  first.join();
}

// ---- intra-op threads -----------------------------------------------------------------------

TEST(CpuParallelExecutor, IntraOpThreadsDefaultAndExplicit) {
  // Each node reports the intra-op threads of the thread that ran it.
  auto seen = std::make_shared<std::vector<int>>(4, 0);
  Graph graph;
  const ValueId x = graph.add_input("x");
  for (int k = 0; k < 4; ++k) {
    const NodeId node =
        graph.add_node("test::threads", {x}, {"Tensor"}, kLaunchesKernel, unary([seen, k](const at::Tensor& t) {
                         (*seen)[k] = at::get_num_threads();
                         return t + k;
                       }));
    graph.add_output(graph.node(node).outputs[0]);
  }
  const Plan plan = plan_with(graph, {0, 1, 2, 3}, {0, 1, 2, 3});
  const int cores = usable_cores();
  const int caller = at::get_num_threads();

  CpuParallelExecutor automatic(graph, plan);
  EXPECT_EQ(automatic.intra_op_threads(), std::max(1, cores / 4));
  automatic.run({at::randn({2, 2})});
  EXPECT_THAT(*seen, ::testing::Each(automatic.intra_op_threads()));
  EXPECT_EQ(at::get_num_threads(), caller) << "the caller's intra-op threads are restored";

  const int every_core = std::max(cores, 1);  // more than automatic's cores / 4 wherever cores > 1
  CpuParallelExecutor explicit_count(graph, plan, executor_options(every_core, 0));
  EXPECT_EQ(explicit_count.intra_op_threads(), every_core);
  explicit_count.run({at::randn({2, 2})});
  EXPECT_THAT(*seen, ::testing::Each(every_core));
  EXPECT_EQ(at::get_num_threads(), caller);
  try {
    CpuParallelExecutor too_many(graph, plan, executor_options(every_core + 1, 0));
    ADD_FAILURE() << "more intra-op threads than cores were accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr(fmt::format("intra_op_threads {} is more than the {} cores here",
                                                               every_core + 1, every_core)));
  }
  // A thread started now still gets the caller's count, not the workers'.
  int fresh = 0;
  std::thread([&fresh] { fresh = at::get_num_threads(); }).join();
  EXPECT_EQ(fresh, caller);
}

// ---- pinned workers -------------------------------------------------------------------------

// The CPUs the calling thread may run on.
std::vector<int> cpus_of_this_thread() {
  std::vector<int> cpus;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &mask)) cpus.push_back(cpu);
  }
  return cpus;
}

// `streams` independent nodes on streams of their own; each reports the CPUs its thread may use.
struct AffinityProbe {
  Graph graph;
  Plan plan;
  std::shared_ptr<std::vector<std::vector<int>>> seen;
};

AffinityProbe affinity_probe(int streams) {
  AffinityProbe probe;
  probe.seen = std::make_shared<std::vector<std::vector<int>>>(static_cast<std::size_t>(streams));
  const ValueId x = probe.graph.add_input("x");
  std::vector<int> stream_of;
  std::vector<NodeId> order;
  for (int k = 0; k < streams; ++k) {
    const NodeId node = probe.graph.add_node("test::where", {x}, {"Tensor"}, kLaunchesKernel,
                                             unary([seen = probe.seen, k](const at::Tensor& t) {
                                               (*seen)[static_cast<std::size_t>(k)] = cpus_of_this_thread();
                                               return t + k;
                                             }));
    probe.graph.add_output(probe.graph.node(node).outputs[0]);
    stream_of.push_back(k);
    order.push_back(node);
  }
  probe.plan = plan_with(probe.graph, stream_of, order);
  return probe;
}

TEST(CpuParallelExecutor, WorkersThatFillTheCpusArePinnedOneToEach) {
  const std::vector<int> allowed = allowed_cpus();
  const int cpus = static_cast<int>(allowed.size());
  if (cpus < 2) GTEST_SKIP() << "pinning needs at least 2 CPUs; this thread may use " << cpus;
  const AffinityProbe probe = affinity_probe(cpus);
  CpuParallelExecutor executor(probe.graph, probe.plan, executor_options(1, 0, cpus));
  const std::vector<int> pinned = executor.worker_cpus();
  EXPECT_EQ(std::set<int>(pinned.begin(), pinned.end()), std::set<int>(allowed.begin(), allowed.end()))
      << "one worker on each usable CPU";
  for (int run = 0; run < 5; ++run) {
    executor.run({at::ones({2})});
    for (const auto& seen : *probe.seen) {
      ASSERT_EQ(seen.size(), 1u) << "a node ran on an unpinned thread";
      EXPECT_THAT(pinned, ::testing::Contains(seen[0]));
    }
  }
  EXPECT_EQ(cpus_of_this_thread(), allowed) << "the caller stays unpinned";
}

TEST(CpuParallelExecutor, WorkersAreLeftToTheSchedulerWhenAskedOrWithTeamsOrWhenTheyDoNotFillTheCpus) {
  const std::vector<int> allowed = allowed_cpus();
  const int cpus = static_cast<int>(allowed.size());
  if (cpus < 2) GTEST_SKIP() << "needs at least 2 CPUs; this thread may use " << cpus;
  CpuExecutorOptions unpinned = executor_options(1, 0, cpus);
  unpinned.cpu.pin_workers = false;
  // Two threads each: an OpenMP team inherits its worker's CPUs, so one CPU would serialise it.
  const CpuExecutorOptions teams = executor_options(2, 0, cpus);
  // Fewer workers than CPUs: pinned, several processes would crowd the same first CPUs.
  const CpuExecutorOptions fewer = executor_options(1, 0, cpus - 1);
  for (const CpuExecutorOptions& options : {unpinned, teams, fewer}) {
    const AffinityProbe probe = affinity_probe(options.workers);
    CpuParallelExecutor executor(probe.graph, probe.plan, options);
    EXPECT_TRUE(executor.worker_cpus().empty());
    executor.run({at::ones({2})});
    for (const auto& seen : *probe.seen) EXPECT_EQ(seen, allowed);
  }
}

TEST(CpuParallelExecutor, MoreWorkersThanCpusAreNotPinned) {
  const int cpus = usable_cores();
  const AffinityProbe probe = affinity_probe(cpus + 1);
  CpuParallelExecutor executor(probe.graph, probe.plan, executor_options(1, 0, cpus + 1));
  EXPECT_TRUE(executor.worker_cpus().empty());
  EXPECT_TRUE(
      bitwise_equal(flatten_tensors(executor.run({at::ones({2})})), eager_outputs(probe.graph, {at::ones({2})})));
}

// ---- random graphs --------------------------------------------------------------------------

TEST(CpuParallelRandomGraphs, MatchEagerUnderRandomPlansAndJitter) {
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    const int count = 5 + static_cast<int>(seed * 7919 % 56);
    const Graph graph = random_model(count, seed);
    at::manual_seed(static_cast<std::uint64_t>(seed));
    const std::vector<c10::IValue> inputs{at::randn({4, 6}), at::randn({4, 6})};
    const auto expected = eager_outputs(graph, inputs);
    const int streams = 1 + static_cast<int>(seed % 5);
    CpuParallelExecutor executor(graph, random_plan(graph, streams, seed), executor_options(1, seed));
    for (int run = 0; run < 2; ++run) {
      ASSERT_TRUE(bitwise_equal(flatten_tensors(executor.run(inputs)), expected))
          << "seed " << seed << ", " << count << " nodes, " << streams << " streams, run " << run;
    }
  }
}

// What traces rely on: every node reported once per run, and a node's span starts after the spans
// of everything it depends on ended.
TEST(CpuParallelRandomGraphs, NodeTimingsCoverEveryNodeOnceAndFollowTheEdges) {
  using Clock = std::chrono::steady_clock;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    const Graph graph = random_model(5 + static_cast<int>(seed * 7919 % 56), seed);
    const std::vector<c10::IValue> inputs{at::randn({4, 6}), at::randn({4, 6})};
    std::mutex mutex;
    std::vector<int> reports(graph.size(), 0);
    std::vector<std::pair<Clock::time_point, Clock::time_point>> spans(graph.size());
    CpuExecutorOptions options = executor_options(1, seed);
    options.on_node_done = [&](NodeId id, Clock::time_point start, Clock::time_point end) {
      std::lock_guard<std::mutex> lock(mutex);
      ++reports[id];
      spans[id] = {start, end};
    };
    CpuParallelExecutor executor(graph, random_plan(graph, 1 + static_cast<int>(seed % 5), seed), options);
    for (int run = 1; run <= 2; ++run) {
      executor.run(inputs);
      for (const Node& node : graph.nodes()) {
        ASSERT_EQ(reports[node.id], run) << "node " << node.id << ", seed " << seed;
        EXPECT_LE(spans[node.id].first, spans[node.id].second);
        for (NodeId predecessor : node.predecessors) {
          EXPECT_LE(spans[predecessor].second, spans[node.id].first)
              << "node " << node.id << " started before its predecessor " << predecessor << " ended, seed " << seed;
        }
      }
    }
  }
}

TEST(CpuParallelRandomGraphs, MatchEagerUnderEveryPolicyAndJitter) {
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const int count = 5 + static_cast<int>(seed * 7919 % 56);
    const Graph graph = random_model(count, seed);
    at::manual_seed(seed);
    const std::vector<c10::IValue> inputs{at::randn({4, 6}), at::randn({4, 6})};
    const auto expected = eager_outputs(graph, inputs);
    const auto costs = random_costs(graph, seed);
    std::uint64_t jitter = seed * 100;
    for (const auto& [streams, order] : kExecutedPolicies) {
      for (int cap : {0, 1, 2}) {
        CpuParallelExecutor executor(graph, make_plan(graph, PlanOptions{streams, order, cap}, costs),
                                     executor_options(1, ++jitter));
        ASSERT_TRUE(bitwise_equal(flatten_tensors(executor.run(inputs)), expected))
            << "seed " << seed << ", " << count << " nodes, " << to_string(streams) << "/" << to_string(order)
            << " cap " << cap;
      }
    }
  }
}

// ---- exported models ------------------------------------------------------------------------

struct ModelCase {
  std::string model;
  std::string extension;
  int jitter_seeds;  // runs per plan, each with its own jitter seed
  int random_plans;  // random plans on top of make_plan's
  friend std::ostream& operator<<(std::ostream& out, const ModelCase& c) {
    return out << c.model << "." << c.extension;
  }
};

// Runs an exported model under plans and compares with the reference.
//
// Note [Intra-op threads and bitwise equality]: reductions (branchy's mean, for one) split their
// work by the intra-op thread count, so another count changes the last bits. An executor with the
// default count (the cores shared among its streams) is checked against eager run with that same
// count on the calling thread; one with the caller's own count against the exporter's recorded
// forward. Runs alternate between the two.
class CpuParallelModels : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    const ModelCase& c = GetParam();
    OPARA_REQUIRE_MODEL(c.model);
    graph_ = load(testing::model_path(c.model, c.extension));
    testing::FormatReference reference = testing::format_reference(c.model, c.extension);
    inputs_ = std::move(reference.inputs);
    recorded_ = std::move(reference.expected);
    caller_threads_ = at::get_num_threads();
    ASSERT_TRUE(bitwise_equal(eager_outputs(graph_, inputs_), recorded_));
  }

  void check(const Plan& plan, std::uint64_t jitter, const std::string& label) {
    const bool own_threads = jitter % 2 == 0;
    CpuExecutorOptions options = executor_options(own_threads ? caller_threads_ : 0, jitter);
    options.cpu.split_min_us = 1;  // from the second run on, every timed pooling and activation may split
    CpuParallelExecutor executor(graph_, plan, options);
    const int threads = executor.intra_op_threads();
    if (!own_threads && eager_by_threads_.count(threads) == 0) {
      eager_by_threads_[threads] = eager_outputs(graph_, inputs_, threads);
    }
    const auto& expected = own_threads ? recorded_ : eager_by_threads_[threads];
    // A second run where workers of one intra-op thread may split what the first one timed.
    for (int run = 0; run < (threads == 1 ? 2 : 1); ++run) {
      const auto outputs = flatten_tensors(executor.run(inputs_));
      EXPECT_TRUE(bitwise_equal(outputs, expected))
          << GetParam() << ", " << label << ", " << plan.stream_count << " streams, " << threads
          << " intra-op threads, jitter seed " << jitter << ", run " << run << " (" << executor.split_runs()
          << " split so far): max |diff| " << max_abs_difference(outputs, expected);
    }
  }

  Graph graph_;
  std::vector<c10::IValue> inputs_;
  std::vector<at::Tensor> recorded_;
  int caller_threads_ = 1;
  std::map<int, std::vector<at::Tensor>> eager_by_threads_;
};

TEST_P(CpuParallelModels, MatchTheReferenceUnderEveryPolicy) {
  std::uint64_t jitter = 1;
  for (const auto& [streams, order] : kExecutedPolicies) {
    for (int cap : {0, 1, 2}) {
      const Plan plan = make_plan(graph_, PlanOptions{streams, order, cap});
      const std::string label = fmt::format("{}/{} cap {}", to_string(streams), to_string(order), cap);
      for (int k = 0; k < GetParam().jitter_seeds; ++k) check(plan, jitter++, label);
    }
  }
}

// One stream and a second worker with nothing of its own: it is idle whenever a node starts, so
// from the second run on every timed pooling and activation is split, under jitter.
TEST_P(CpuParallelModels, SplitNodesKeepTheBits) {
  if (usable_cores() < 2) GTEST_SKIP() << "one usable CPU: no worker is ever idle";
  const Plan one_stream = make_plan(graph_, PlanOptions{StreamPolicy::kSingle, OrderPolicy::kTopological});
  CpuExecutorOptions options;
  options.workers = 2;
  options.cpu.intra_op_threads = 1;
  options.cpu.split_min_us = 1;
  options.jitter_seed = 5;
  CpuParallelExecutor executor(graph_, one_stream, options);
  const std::vector<at::Tensor> expected = eager_outputs(graph_, inputs_, 1);
  for (int run = 0; run < 3; ++run) {
    const auto outputs = flatten_tensors(executor.run(inputs_));
    EXPECT_TRUE(bitwise_equal(outputs, expected))
        << GetParam() << ", run " << run << ": max |diff| " << max_abs_difference(outputs, expected);
  }
  const std::string& model = GetParam().model;
  const bool has_splitting_kinds = model.rfind("branchy", 0) == 0 || model == "googlenet";
  if (has_splitting_kinds) {
    EXPECT_GT(executor.split_runs(), 0u) << GetParam();
  }
}

TEST_P(CpuParallelModels, MatchTheReferenceUnderRandomPlans) {
  for (int k = 0; k < GetParam().random_plans; ++k) {
    const auto seed = static_cast<std::uint64_t>(k + 1);
    check(random_plan(graph_, 1 + k % 6, seed), 1000 + seed, fmt::format("random plan {}", seed));
  }
}

// The inplace model has every aliasing hazard; it gets the most interleavings (3 x 24 plans).
INSTANTIATE_TEST_SUITE_P(
    CpuParallel, CpuParallelModels,
    ::testing::Values(ModelCase{"inplace", "pt", 3, 30}, ModelCase{"inplace", "pt2", 3, 30},
                      ModelCase{"branchy", "pt", 1, 10}, ModelCase{"branchy", "pt2", 1, 10},
                      ModelCase{"googlenet", "pt", 1, 4}, ModelCase{"googlenet", "pt2", 1, 4},
                      ModelCase{"recurrent", "pt2", 1, 6},
                      // Traced attention with an undefined output (the weights it does not compute).
                      ModelCase{"vit", "pt", 1, 6},
                      // Half precision: the same plans, in the dtype it was exported in.
                      ModelCase{"branchy_bfloat16", "pt", 1, 4}, ModelCase{"branchy_bfloat16", "pt2", 1, 4},
                      ModelCase{"recurrent_float16", "pt2", 1, 4}),
    [](const auto& info) { return info.param.model + "_" + info.param.extension; });

}  // namespace
}  // namespace opara
