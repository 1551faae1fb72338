// The static cost estimate: roofline arithmetic on the shapes of one recorded run.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string_view>

#include "graph/op_table.h"
#include "opara/error.h"
#include "opara/plan.h"

namespace opara {
namespace {

const TensorShape* tensor_argument(const NodeShapes& shapes, std::size_t index) {
  if (index >= shapes.arguments.size() || shapes.arguments[index].empty()) return nullptr;
  return &shapes.arguments[index].front();
}

}  // namespace

std::optional<double> dense_flops(std::string_view kind, const NodeShapes& shapes) {
  if (shapes.outputs.empty()) return std::nullopt;
  const auto out = static_cast<double>(shapes.outputs.front().numel());
  auto last_dim = [&](std::size_t argument) -> std::optional<double> {
    const TensorShape* tensor = tensor_argument(shapes, argument);
    if (!tensor || tensor->sizes.empty()) return std::nullopt;
    return static_cast<double>(tensor->sizes.back());
  };
  const TensorShape* input = tensor_argument(shapes, 0);
  const TensorShape* weight = tensor_argument(shapes, 1);
  if (kind.find("conv") != std::string_view::npos) {
    // Weight [C_out, C_in/groups, k...] (transposed: [C_in, C_out/groups, k...]): each output
    // (input) element takes weight.numel / weight.size(0) multiply-adds.
    if (!input || !weight || weight->sizes.empty() || weight->sizes[0] == 0) return std::nullopt;
    const double per_element = static_cast<double>(weight->numel()) / static_cast<double>(weight->sizes[0]);
    const bool transposed = kind.find("transpose") != std::string_view::npos;
    return 2 * (transposed ? static_cast<double>(input->numel()) : out) * per_element;
  }
  if (kind == "aten::linear" || kind == "aten::mm" || kind == "aten::bmm" || kind == "aten::matmul") {
    if (auto k = last_dim(0)) return 2 * out * *k;
    return std::nullopt;
  }
  if (kind == "aten::addmm" || kind == "aten::baddbmm" || kind == "aten::addbmm") {
    if (auto k = last_dim(1)) return 2 * out * *k;
    return std::nullopt;
  }
  if (kind == "aten::lstm" || kind == "aten::gru" || kind == "aten::rnn_tanh" || kind == "aten::rnn_relu") {
    // Fused recurrent layers take their weights as one list (argument 2). Each weight matrix, of
    // every layer and direction, multiplies every (step, batch) row of the sequence once.
    if (!input || input->sizes.empty() || input->sizes.back() == 0 || shapes.arguments.size() < 3) return std::nullopt;
    const double rows = static_cast<double>(input->numel()) / static_cast<double>(input->sizes.back());
    double matrix_elements = 0;
    for (const TensorShape& parameter : shapes.arguments[2]) {
      if (parameter.sizes.size() == 2) matrix_elements += static_cast<double>(parameter.numel());
    }
    return 2 * rows * matrix_elements;
  }
  if (kind.find("scaled_dot_product") != std::string_view::npos) {
    const TensorShape* key = tensor_argument(shapes, 1);
    if (!input || !key || key->sizes.size() < 2) return std::nullopt;
    const auto keys = static_cast<double>(key->sizes[key->sizes.size() - 2]);
    return 2 * static_cast<double>(input->numel()) * keys + 2 * out * keys;  // Q K^T, then P V
  }
  return std::nullopt;
}

std::int64_t TensorShape::numel() const {
  std::int64_t count = 1;
  for (std::int64_t size : sizes) count *= size;
  return count;
}

std::vector<NodeCost> estimate_costs(const Graph& graph, const std::vector<NodeShapes>& shapes, double ridge_point) {
  if (!shapes.empty() && shapes.size() != graph.size()) {
    throw Error(fmt::format("{}: shapes for {} nodes given for a graph of {} nodes", graph.source_path, shapes.size(),
                            graph.size()));
  }
  if (!(ridge_point > 0))
    throw Error(fmt::format("the ridge point must be positive FLOPs per byte, not {}", ridge_point));
  std::vector<NodeCost> costs(graph.size());
  for (const Node& node : graph.nodes()) {
    NodeCost& cost = costs[node.id];
    const bool compute_bound = op_traits(node.kind).compute_bound;
    cost.op_class = compute_bound ? OpClass::kCompute : OpClass::kMemory;
    if (!node.has(kLaunchesKernel)) continue;  // demand 0: runs on the host
    if (shapes.empty()) {
      cost.demand = 1;
      continue;
    }
    const NodeShapes& node_shapes = shapes[node.id];
    double bytes = 0;
    for (const auto& argument : node_shapes.arguments) {
      for (const TensorShape& tensor : argument) bytes += static_cast<double>(tensor.bytes());
    }
    double elements = 0;
    for (const TensorShape& tensor : node_shapes.outputs) {
      bytes += static_cast<double>(tensor.bytes());
      elements += static_cast<double>(tensor.numel());
    }
    const std::optional<double> dense = compute_bound ? dense_flops(node.kind, node_shapes) : std::nullopt;
    const double flops = dense.value_or(elements);
    if (dense && bytes > 0 && *dense / bytes < ridge_point) cost.op_class = OpClass::kMemory;
    cost.demand = std::max(bytes, flops / ridge_point);
  }
  return costs;
}

}  // namespace opara
