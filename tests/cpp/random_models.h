#pragma once

// Executable graphs for the tests: nodes whose op is a lambda, and seeded random models (element-wise,
// matmul and reduction kernels, views without a kernel, multi-output nodes and list constructs)
// that every executor must run bitwise like the eager reference; and a graph of many independent
// branches, for stream counts past PyTorch's pool.

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "exec/node_op.h"
#include "opara/graph.h"

namespace opara::testing {

// ---- a NodeOp written inline ----------------------------------------------------------------

using Body = std::function<std::vector<c10::IValue>(const std::vector<c10::IValue>&)>;
// A body that also reads constant tensors of its own (a weight): the op's constants, as it holds them.
using BodyWithConstants =
    std::function<std::vector<c10::IValue>(const std::vector<c10::IValue>&, const std::vector<at::Tensor>&)>;

// Its constants go where NodeOp::to sends it, as an importer's weights do: an op that kept a CPU
// weight would fail on the GPU in every executor, the eager reference included.
class LambdaOp final : public NodeOp {
 public:
  explicit LambdaOp(Body body)
      : LambdaOp([body = std::move(body)](const std::vector<c10::IValue>& in,
                                          const std::vector<at::Tensor>& /*constants*/) { return body(in); },
                 {}) {}
  LambdaOp(BodyWithConstants body, std::vector<at::Tensor> constants)
      : body_(std::move(body)), constants_(std::move(constants)) {}
  void run(std::vector<c10::IValue>& stack) const override { stack = body_(stack, constants_); }
  [[nodiscard]] std::shared_ptr<const NodeOp> to(c10::Device device) const override {
    std::vector<at::Tensor> moved;
    for (const at::Tensor& constant : constants_) moved.push_back(constant.to(device));
    return std::make_shared<LambdaOp>(body_, std::move(moved));
  }

 private:
  BodyWithConstants body_;
  std::vector<at::Tensor> constants_;
};

inline std::shared_ptr<const NodeOp> op(Body body) {
  return std::make_shared<LambdaOp>(std::move(body));
}

inline std::shared_ptr<const NodeOp> op(BodyWithConstants body, std::vector<at::Tensor> constants) {
  return std::make_shared<LambdaOp>(std::move(body), std::move(constants));
}

// A one-tensor-in, one-tensor-out op.
inline std::shared_ptr<const NodeOp> unary(std::function<at::Tensor(const at::Tensor&)> f) {
  return op([f](const std::vector<c10::IValue>& in) { return std::vector<c10::IValue>{f(in.at(0).toTensor())}; });
}

inline std::shared_ptr<const NodeOp> binary(std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> f) {
  return op([f](const std::vector<c10::IValue>& in) {
    return std::vector<c10::IValue>{f(in.at(0).toTensor(), in.at(1).toTensor())};
  });
}

// Every op of the random graphs sees its inputs as 4x6 tensors: a list is summed, a transposed
// view reshaped (which copies it).
inline at::Tensor as_block(const c10::IValue& value) {
  if (value.isTensor()) return value.toTensor().reshape({4, 6});
  at::Tensor sum;
  for (const at::Tensor& tensor : value.toTensorList().vec()) {
    sum = sum.defined() ? sum + tensor.reshape({4, 6}) : tensor.reshape({4, 6});
  }
  return sum;
}

struct RandomOp {
  const char* kind;
  int arity;
  std::uint32_t flags;
  int outputs;
  // Reads the inputs as 4x6 blocks, then the constants.
  std::function<std::vector<c10::IValue>(const std::vector<at::Tensor>&)> body;
  std::vector<at::Tensor> constants = {};  // moved with the op (NodeOp::to)
};

inline std::vector<RandomOp> random_ops() {
  const at::Tensor weight = at::randn({6, 6}, at::TensorOptions().dtype(at::kFloat)) / 3;
  using Tensors = std::vector<at::Tensor>;
  using Values = std::vector<c10::IValue>;
  return {
      {"test::affine", 1, kLaunchesKernel, 1, [](const Tensors& t) { return Values{t[0] * 0.5 + 1}; }},
      {"test::mix", 2, kLaunchesKernel, 1, [](const Tensors& t) { return Values{t[0] * 0.5 + t[1].sin()}; }},
      {"test::tanh_mul", 2, kLaunchesKernel, 1, [](const Tensors& t) { return Values{(t[0] * t[1]).tanh()}; }},
      {"test::sum3", 3, kLaunchesKernel, 1, [](const Tensors& t) { return Values{t[0] + t[1] - t[2] / 3}; }},
      {"test::mm", 1, kLaunchesKernel, 1, [](const Tensors& t) { return Values{t[0].mm(t[1])}; }, {weight}},
      {"test::center", 1, kLaunchesKernel, 1,
       [](const Tensors& t) { return Values{t[0] - t[0].mean(1, /*keepdim=*/true)}; }},
      {"test::pair", 2, kLaunchesKernel, 2,
       [](const Tensors& t) {
         return Values{t[0].sin(), t[0].cos() * t[1]};
       }},
      {"aten::t", 1, kView, 1, [](const Tensors& t) { return Values{t[0].t()}; }},
      {"aten::view", 1, kView, 1,
       [](const Tensors& t) {
         return Values{t[0].view({6, 4})};
       }},
  };
}

// A seeded random DAG of `count` nodes over two 4x6 inputs: element-wise, matmul and reduction
// kernels, views without a kernel, multi-output nodes and list constructs; every value nobody
// reads is an output.
inline Graph random_model(int count, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  const std::vector<RandomOp> ops = random_ops();
  Graph graph;
  std::vector<ValueId> values{graph.add_input("x"), graph.add_input("y")};
  auto pick = [&] {
    // Mostly recent values: long chains and wide fans both appear.
    const int n = static_cast<int>(values.size());
    const int back = std::min(n - 1, std::geometric_distribution<int>(0.25)(random));
    return std::uniform_int_distribution<int>(0, 3)(random) == 0
               ? values[std::uniform_int_distribution<int>(0, n - 1)(random)]
               : values[n - 1 - back];
  };
  for (int k = 0; k < count; ++k) {
    if (std::uniform_int_distribution<int>(0, 9)(random) == 0) {
      const NodeId list = graph.add_node("prim::ListConstruct", {pick(), pick()}, {"Tensor[]"}, 0,
                                         op([](const std::vector<c10::IValue>& in) {
                                           c10::List<at::Tensor> list;
                                           for (const auto& value : in)
                                             list.push_back(value.isTensor() ? value.toTensor() : as_block(value));
                                           return std::vector<c10::IValue>{list};
                                         }));
      values.push_back(graph.node(list).outputs[0]);
      continue;
    }
    const RandomOp& chosen = ops[std::uniform_int_distribution<std::size_t>(0, ops.size() - 1)(random)];
    std::vector<ValueId> inputs;
    for (int i = 0; i < chosen.arity; ++i) inputs.push_back(pick());
    const auto body = chosen.body;
    const auto blocks_op = [body](const std::vector<c10::IValue>& in, const std::vector<at::Tensor>& constants) {
      std::vector<at::Tensor> blocks;
      for (const auto& value : in) blocks.push_back(as_block(value));
      for (const at::Tensor& constant : constants) {
        // CUDA's kernels refuse a constant left on another device; meta's mm, which stands in for
        // a device in the CPU tests, does not look.
        TORCH_CHECK(constant.device() == blocks.front().device(), "a constant on ", constant.device(),
                    " read with inputs on ", blocks.front().device());
        blocks.push_back(constant);
      }
      return body(blocks);
    };
    const NodeId node = graph.add_node(chosen.kind, inputs, std::vector<std::string>(chosen.outputs, "Tensor"),
                                       chosen.flags, op(blocks_op, chosen.constants));
    for (ValueId output : graph.node(node).outputs) values.push_back(output);
  }
  for (const Value& value : graph.values()) {
    if (value.producer != kNoNode && value.users.empty()) graph.add_output(value.id);
  }
  graph.add_output(values[std::uniform_int_distribution<std::size_t>(2, values.size() - 1)(random)]);
  return graph;
}

// ---- a wide graph -----------------------------------------------------------------------------

// x -> `branches` independent two-node branches -> their sum: Opara opens one stream per branch.
inline Graph wide_graph(int branches) {
  Graph graph;
  const ValueId x = graph.add_input("x");
  std::vector<ValueId> ends;
  for (int b = 0; b < branches; ++b) {
    const double scale = 1.0 + b;
    const NodeId first = graph.add_node("test::scale", {x}, {"Tensor"}, kLaunchesKernel,
                                        unary([scale](const at::Tensor& t) { return (t * scale).sin(); }));
    const NodeId second = graph.add_node("test::tanh", {graph.node(first).outputs[0]}, {"Tensor"}, kLaunchesKernel,
                                         unary([](const at::Tensor& t) { return t.tanh() + 1; }));
    ends.push_back(graph.node(second).outputs[0]);
  }
  const NodeId sum =
      graph.add_node("test::sum", ends, {"Tensor"}, kLaunchesKernel, op([](const std::vector<c10::IValue>& in) {
                       at::Tensor total = in[0].toTensor().clone();
                       for (std::size_t i = 1; i < in.size(); ++i) total.add_(in[i].toTensor());
                       return std::vector<c10::IValue>{total};
                     }));
  graph.add_output(graph.node(sum).outputs[0]);
  return graph;
}

}  // namespace opara::testing
