#include "import/inline_wrappers.h"

#include <fmt/format.h>

#include <functional>

#include "import/import_errors.h"

namespace opara {
namespace {

using Rename = std::function<std::string(const std::string&)>;

constexpr std::string_view kGradWrapper = "torch.ops.higher_order.wrap_with_set_grad_enabled";
constexpr std::string_view kAutocastWrapper = "torch.ops.higher_order.wrap_with_autocast";

class Inliner {
 public:
  explicit Inliner(std::string path) : path_(std::move(path)) {}

  // Appends `nodes` to the result, their names passed through `rename`.
  void splice(const std::vector<ep::Node>& nodes, const Rename& rename) {
    for (const ep::Node& node : nodes) {
      ep::Node copy = node;
      std::vector<ep::NamedArgument> inputs = node.get_inputs();
      for (ep::NamedArgument& input : inputs) {
        if (input.get_arg().tag() != ep::Argument::Tag::AS_GRAPH) input.set_arg(renamed(input.get_arg(), rename));
      }
      copy.set_inputs(std::move(inputs));
      std::vector<ep::Argument> outputs;
      for (const ep::Argument& output : node.get_outputs()) outputs.push_back(renamed(output, rename));
      copy.set_outputs(std::move(outputs));
      if (node.get_target() == kGradWrapper || node.get_target() == kAutocastWrapper) {
        inline_body(copy);
      } else {
        result_.nodes.push_back(std::move(copy));
      }
    }
  }

  InlinedNodes take() { return std::move(result_); }

 private:
  // The wrapper's arguments: its flags, the body (a graph), then the body's operands.
  void inline_body(const ep::Node& wrapper) {
    const auto& inputs = wrapper.get_inputs();
    std::size_t body_at = 0;
    while (body_at < inputs.size() && inputs[body_at].get_arg().tag() != ep::Argument::Tag::AS_GRAPH) ++body_at;
    if (body_at == inputs.size())
      fail_import(path_, "{} without a body graph; the file is damaged", wrapper.get_target());
    if (wrapper.get_target() == kAutocastWrapper && autocast_enabled(inputs)) {
      fail_import(path_,
                  "a torch.autocast region (enabled=True): its dtypes are chosen at run time, which opara does not "
                  "do. Export the model in the dtype you want, or save ep.run_decompositions() (which writes the "
                  "casts into the graph)");
    }
    const ep::Graph& body = *inputs[body_at].get_arg().get_as_graph().get_graph();
    std::unordered_map<std::string, std::string> names;  // body name -> name in the result
    std::vector<std::string> operands;
    for (std::size_t i = body_at + 1; i < inputs.size(); ++i) {
      for (const std::string& name : value_names(inputs[i].get_arg())) operands.push_back(name);
    }
    std::vector<std::string> parameters;
    for (const ep::Argument& input : body.get_inputs()) {
      for (const std::string& name : value_names(input)) parameters.push_back(name);
    }
    if (parameters.size() != operands.size()) {
      fail_import(path_, "{} passes {} values to a body of {} inputs; the file is damaged", wrapper.get_target(),
                  operands.size(), parameters.size());
    }
    for (std::size_t i = 0; i < parameters.size(); ++i) names[parameters[i]] = operands[i];
    std::vector<std::string> results;
    for (const ep::Argument& output : wrapper.get_outputs()) {
      for (const std::string& name : value_names(output)) results.push_back(name);
    }
    std::vector<std::string> body_results;
    for (const ep::Argument& output : body.get_outputs()) {
      for (const std::string& name : value_names(output)) body_results.push_back(name);
    }
    for (std::size_t i = 0; i < results.size() && i < body_results.size(); ++i) {
      auto [at, fresh] = names.emplace(body_results[i], results[i]);
      // An operand returned as it is, or one value returned twice: the wrapper's result is that value.
      if (!fresh) result_.aliases[results[i]] = at->second;
    }
    const std::string prefix = fmt::format("inlined{}.", ++bodies_);
    splice(body.get_nodes(), [&names, prefix](const std::string& name) {
      auto found = names.find(name);
      return found != names.end() ? found->second : prefix + name;
    });
  }

  // wrap_with_autocast(device_type, dtype, enabled, cache_enabled, body, *operands)
  static bool autocast_enabled(const std::vector<ep::NamedArgument>& inputs) {
    return inputs.size() > 2 && inputs[2].get_arg().tag() == ep::Argument::Tag::AS_BOOL &&
           inputs[2].get_arg().get_as_bool();
  }

  std::string path_;
  InlinedNodes result_;
  int bodies_ = 0;
};

}  // namespace

InlinedNodes inline_wrappers(const ep::Graph& graph, const std::string& path) {
  Inliner inliner(path);
  inliner.splice(graph.get_nodes(), [](const std::string& name) { return name; });
  InlinedNodes inlined = inliner.take();
  if (inlined.aliases.empty()) return inlined;
  const auto resolve = [&aliases = inlined.aliases](std::string name) {
    for (auto found = aliases.find(name); found != aliases.end(); found = aliases.find(name)) name = found->second;
    return name;
  };
  for (auto& [name, target] : inlined.aliases) target = resolve(target);
  for (ep::Node& node : inlined.nodes) {
    std::vector<ep::NamedArgument> inputs = node.get_inputs();
    for (ep::NamedArgument& input : inputs) input.set_arg(renamed(input.get_arg(), resolve));
    node.set_inputs(std::move(inputs));
  }
  return inlined;
}

}  // namespace opara
