#include "exec/symbolic_sizes_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/jit.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "exec/first_line.h"
#include "exec/shape_text.h"
#include "opara/error.h"

namespace opara {
namespace {

std::string range_text(const InputSize& size) {
  if (size.max == std::numeric_limits<std::int64_t>::max()) return fmt::format("{} >= {}", size.symbol, size.min);
  return fmt::format("{} in [{}, {}]", size.symbol, size.min, size.max);
}

// Each condition the export assumed, run as TorchScript over the inputs (its code is Python's
// arithmetic on sizes: // % max min comparisons, which TorchScript reads as Python does).
void check_guards(const Graph& graph, const std::vector<at::Tensor>& inputs) {
  for (const InputGuard& guard : graph.input_guards) {
    std::shared_ptr<torch::jit::CompilationUnit> unit;
    try {
      unit = torch::jit::compile(
          fmt::format("def guard(inputs: List[Tensor]) -> bool:\n    return bool({})\n", guard.script));
    } catch (const std::exception& error) {
      throw Error(
          fmt::format("{}: opara cannot check the condition {} the program was exported under ({}). Export "
                      "it with static shapes, or with simpler dynamic_shapes",
                      graph.source_path, guard.code, first_line(error)));
    }
    const c10::IValue holds = unit->get_function("guard")({c10::List<at::Tensor>(inputs)});
    if (!holds.toBool()) {
      std::vector<std::string> shapes;
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        shapes.push_back(fmt::format("'{}' {}", graph.value(graph.inputs()[i]).name, shape_text(inputs[i].sizes())));
      }
      throw Error(
          fmt::format("{}: the inputs ({}) do not meet the condition {} the program was exported under. "
                      "Export it again with example inputs of these sizes, or compile it for sizes that "
                      "meet it",
                      graph.source_path, fmt::join(shapes, ", "), guard.code));
    }
  }
}

}  // namespace

void check_symbolic_sizes(const Graph& graph, const std::vector<at::Tensor>& inputs) {
  const auto& expected = graph.symbolic_input_sizes;
  // An undefined input: InputSignature names it.
  const bool all_defined = std::all_of(inputs.begin(), inputs.end(), [](const at::Tensor& t) { return t.defined(); });
  if (expected.empty() || !all_defined) return;
  // Where each symbol took its value first: "input 0 ('x') dimension 1".
  std::map<std::string, std::pair<std::int64_t, std::string>> bound;
  for (std::size_t i = 0; i < inputs.size() && i < expected.size(); ++i) {
    const at::Tensor& input = inputs[i];
    const std::string where =
        fmt::format("{}: input {} ('{}')", graph.source_path, i, graph.value(graph.inputs()[i]).name);
    if (static_cast<std::size_t>(input.dim()) != expected[i].size()) {
      throw Error(fmt::format("{} has {} dimensions ({}), the program takes {}", where, input.dim(),
                              shape_text(input.sizes()), expected[i].size()));
    }
    for (std::size_t d = 0; d < expected[i].size(); ++d) {
      const InputSize& size = expected[i][d];
      const std::int64_t given = input.size(static_cast<std::int64_t>(d));
      const std::string dimension = fmt::format("{} dimension {}", where, d);
      if (size.symbol.empty()) {
        if (given != size.fixed) {
          throw Error(
              fmt::format("{} is {}; the program was exported with it fixed at {}. Export it again with "
                          "this dimension in dynamic_shapes",
                          dimension, given, size.fixed));
        }
        continue;
      }
      if (given < size.min || given > size.max) {
        throw Error(
            fmt::format("{} is {}, outside the sizes the program was exported for ({}). Export it again "
                        "with a wider range for this dimension",
                        dimension, given, range_text(size)));
      }
      auto [first, fresh] = bound.try_emplace(size.symbol, given, dimension);
      if (!fresh && first->second.first != given) {
        throw Error(fmt::format("{} is {} and {} is {}, and the program was exported with both the size {}", dimension,
                                given, first->second.second, first->second.first, size.symbol));
      }
    }
  }
  check_guards(graph, inputs);
}

}  // namespace opara
