// An FX node becomes a graph node in phases, each leaving its part of a NodeCall for the next:
//
//   locate          the target, and where errors point ("node 3 (torch.ops.aten.add.Tensor) at m.py:7")
//   find_operator   the dispatcher's operator; refuses higher-order ops (arithmetic on sizes is
//                   a node of its own: symbolic_scalar_op.h)
//   bind_arguments  each schema argument as a slot: runtime input, folded constant or default;
//                   in-place writes noted
//   bind_results    each schema result as node outputs (a tensor list unpacked) or dropped
//   add_to_graph    the node, its outputs' names, and the views its schema annotates
#include "import/exported_node.h"

#include <fmt/format.h>

#include <tuple>
#include <unordered_map>
#include <utility>

#include "graph/op_table.h"
#include "import/import_errors.h"
#include "import/node_properties.h"
#include "import/symbolic_scalar_op.h"

namespace opara {
namespace {

// One node output: its value name, its type, and the schema result it comes from.
struct NodeOutput {
  std::string name;
  std::string type;  // "Tensor", "SymInt", "SymFloat", "SymBool"
  std::size_t result;
};

// One FX node on its way to a graph node: what each phase leaves for the next.
struct NodeCall {
  std::string target;
  std::string where;                // what errors name: "node 3 (target)", " at model.py:12" where known
  std::string source;               // "model.py:12"
  std::vector<ValueId> inputs;      // the runtime inputs
  std::vector<ArgumentSlot> slots;  // per schema argument
  std::vector<std::pair<std::size_t, std::size_t>> runtime_range;  // per schema argument, in `inputs`
  std::string constants;                                           // "alpha=2": the constants given
  NodeAliasing aliasing;
  std::vector<ResultUse> results;  // per schema result
  std::vector<NodeOutput> outputs;
};

// The innermost "File "...", line N" of an FX stack trace that is a real file (FX's generated
// code is named "<eval_with_key>"): the model's own line.
std::string last_frame(const std::string& stack) {
  std::string found;
  for (std::size_t at = stack.find("File \""); at != std::string::npos; at = stack.find("File \"", at + 1)) {
    const auto end = stack.find('"', at + 6);
    const auto line = stack.find("line ", end);
    if (end == std::string::npos || line == std::string::npos) break;
    const std::string file = stack.substr(at + 6, end - at - 6);
    const auto digits = stack.find_first_not_of("0123456789", line + 5);
    if (!file.empty() && file[0] != '<') found = fmt::format("{}:{}", file, stack.substr(line + 5, digits - line - 5));
  }
  return found;
}

// FX passes Python numbers where a schema wants a Tensor (aten.mul.Tensor(x, 2.0)); like
// Python's argument parser, make them wrapped-number tensors, which type promotion ranks
// below every real tensor. A number computed in the graph (aten::item's) is wrapped at run
// time (ArgumentSlot::wrap_number), and only where the schema wants a Tensor.
void wrap_number_for_tensor_argument(const c10::Argument& formal, ArgumentSlot& slot) {
  auto type = formal.type();
  if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
  const bool wants_tensor = type->kind() == c10::TypeKind::TensorType;
  slot.wrap_number = slot.wrap_number && wants_tensor;
  if (!wants_tensor || slot.kind != ArgumentSlot::Kind::kConstant) return;
  if (!slot.constant.isDouble() && !slot.constant.isInt() && !slot.constant.isBool()) return;
  slot.constant = wrapped_number(slot.constant.toScalar());
}

class NodeImporter {
 public:
  NodeImporter(const std::string& path, ExportedNames& names, Graph& graph)
      : path_(path), names_(names), graph_(graph) {}

  NodeAliasing add(const ep::Node& node, const std::string& target) {
    NodeCall call = locate(node, target);
    if (is_symbolic_arithmetic(target)) {
      add_symbolic_arithmetic(node, call);
      return {};
    }
    const c10::OperatorHandle op = find_operator(call);
    bind_arguments(node, op.schema(), call);
    bind_results(node, op.schema(), call);
    add_to_graph(op, call);
    return std::move(call.aliasing);
  }

 private:
  NodeCall locate(const ep::Node& node, const std::string& target) const {
    NodeCall call;
    call.target = target;
    call.where = fmt::format("node {} ({})", graph_.size(), target);
    if (auto stack = node.get_metadata().find("stack_trace"); stack != node.get_metadata().end()) {
      call.source = last_frame(stack->second);
      call.where += " at " + call.source;
    }
    return call;
  }

  c10::OperatorHandle find_operator(const NodeCall& call) const {
    const std::string& target = call.target;
    if (target.rfind("torch.ops.", 0) != 0 || target.rfind("torch.ops.higher_order.", 0) == 0) {
      fail_import(path_,
                  "{}: {} is not an operator opara can call (higher-order ops such as cond and "
                  "while_loop, and Python functions, are not supported). Export without data-dependent "
                  "control flow",
                  call.where, target);
    }
    auto op = dispatcher_operator(target);
    if (!op) {
      fail_import(path_,
                  "{}: the operator {} is not registered in this LibTorch. Load the library that "
                  "defines it first, or export without it",
                  call.where, target);
    }
    return *op;
  }

  // Arithmetic on sizes (a dynamic-shape program's operator.mul of two sizes): its operands in the
  // node's order, its one result a number.
  void add_symbolic_arithmetic(const ep::Node& node, NodeCall& call) {
    std::vector<ArgumentSlot> operands;
    for (const ep::NamedArgument& named : node.get_inputs()) {
      operands.push_back(
          argument_slot(named.get_arg(), ArgumentSite{path_, call.where, named.get_name()}, names_, call.inputs));
    }
    auto op = symbolic_scalar_op(call.target, std::move(operands));
    if (!op) {
      fail_import(path_,
                  "{}: {} computes with symbolic sizes in a way opara does not evaluate (it evaluates + - * // % "
                  "/, comparisons, and/or/not, sym_max/min/float/int/ite, ceil/floor/trunc). {}",
                  call.where, call.target, kDynamicShapesFix);
    }
    const auto& outputs = node.get_outputs();
    std::string name, type;
    if (outputs.size() == 1) std::tie(name, type) = number_name(outputs[0]);
    if (name.empty()) fail_import(path_, "{}: its result is not one named number; the program is damaged", call.where);
    const NodeId id = graph_.add_node(call.target, call.inputs, {type}, 0u, std::move(op));
    graph_.set_source(id, call.source, "");
    const ValueId value = graph_.node(id).outputs.front();
    names_.values[name] = value;
    graph_.set_value_name(value, name);
  }

  // A symbolic result's name and type; empty for other kinds.
  static std::pair<std::string, std::string> number_name(const ep::Argument& out) {
    using Tag = ep::Argument::Tag;
    if (out.tag() == Tag::AS_SYM_INT && out.get_as_sym_int().tag() == ep::SymIntArgument::Tag::AS_NAME) {
      return {out.get_as_sym_int().get_as_name(), "SymInt"};
    }
    if (out.tag() == Tag::AS_SYM_FLOAT && out.get_as_sym_float().tag() == ep::SymFloatArgument::Tag::AS_NAME) {
      return {out.get_as_sym_float().get_as_name(), "SymFloat"};
    }
    if (out.tag() == Tag::AS_SYM_BOOL && out.get_as_sym_bool().tag() == ep::SymBoolArgument::Tag::AS_NAME) {
      return {out.get_as_sym_bool().get_as_name(), "SymBool"};
    }
    return {};
  }

  // Every schema argument as a slot: the node's named argument, else the schema's default.
  void bind_arguments(const ep::Node& node, const c10::FunctionSchema& schema, NodeCall& call) const {
    std::unordered_map<std::string, const ep::Argument*> given;
    for (const ep::NamedArgument& named : node.get_inputs()) given[named.get_name()] = &named.get_arg();
    for (const c10::Argument& formal : schema.arguments()) {
      const std::size_t first_input = call.inputs.size();
      auto found = given.find(formal.name());
      ArgumentSlot slot;
      if (found != given.end()) {
        slot = given_slot(formal, *found->second, call);
        given.erase(found);
      } else if (formal.default_value()) {
        slot.constant = *formal.default_value();
      } else {
        fail_import(path_,
                    "{}: the required argument {} is missing; the program does not match this "
                    "LibTorch's schema {}",
                    call.where, formal.name(), c10::toString(schema));
      }
      note_writes(formal, slot, first_input, call);
      call.slots.push_back(std::move(slot));
      call.runtime_range.emplace_back(first_input, call.inputs.size());
    }
    if (!given.empty()) {
      fail_import(path_,
                  "{}: argument {} is not in this LibTorch's schema {}. Export the model with torch " TORCH_VERSION,
                  call.where, given.begin()->first, c10::toString(schema));
    }
  }

  ArgumentSlot given_slot(const c10::Argument& formal, const ep::Argument& arg, NodeCall& call) const {
    ArgumentSlot slot = argument_slot(arg, ArgumentSite{path_, call.where, formal.name()}, names_, call.inputs);
    wrap_number_for_tensor_argument(formal, slot);
    if (slot.kind == ArgumentSlot::Kind::kConstant && !slot.constant.isNone()) {
      call.constants +=
          fmt::format("{}{}={}", call.constants.empty() ? "" : ", ", formal.name(), constant_summary(slot.constant));
    }
    return slot;
  }

  // Tensor(a!) or Tensor(a!)[] (the _foreach_*_ ops): every runtime element is written. A
  // written parameter is refused: opara's weights are folded into the nodes.
  void note_writes(const c10::Argument& formal, const ArgumentSlot& slot, std::size_t first_input,
                   NodeCall& call) const {
    if (!formal.alias_info() || !formal.alias_info()->isWrite()) return;
    const bool writes_a_parameter =
        (slot.kind == ArgumentSlot::Kind::kConstant && slot.constant.isTensor()) || !slot.list_constants.empty();
    if (writes_a_parameter) {
      fail_import(path_, "{} writes the parameter {} in place; opara runs graphs whose weights do not change",
                  call.where, formal.name());
    }
    if (slot.kind == ArgumentSlot::Kind::kConstant) return;
    for (std::size_t k = first_input; k < call.inputs.size(); ++k) call.aliasing.writes.push_back(call.inputs[k]);
  }

  // Every schema result as node outputs; results the node does not name are dropped.
  void bind_results(const ep::Node& node, const c10::FunctionSchema& schema, NodeCall& call) const {
    const auto& outputs = node.get_outputs();
    for (std::size_t i = 0; i < schema.returns().size(); ++i) {
      if (i < outputs.size()) {
        bind_result(i, outputs[i], call);
      } else {
        call.results.push_back(ResultUse::kDrop);
      }
    }
  }

  void bind_result(std::size_t i, const ep::Argument& out, NodeCall& call) const {
    using Tag = ep::Argument::Tag;
    const auto value = [&](const std::string& name, const char* type) { call.outputs.push_back({name, type, i}); };
    if (out.tag() == Tag::AS_TENSOR) {
      call.results.push_back(ResultUse::kValue);
      value(out.get_as_tensor().get_name(), "Tensor");
    } else if (out.tag() == Tag::AS_TENSORS) {
      call.results.push_back(ResultUse::kUnpackList);
      for (const auto& tensor : out.get_as_tensors()) value(tensor.get_name(), "Tensor");
    } else if (out.tag() == Tag::AS_NONE) {
      call.results.push_back(ResultUse::kDrop);
    } else if (auto [name, type] = number_name(out); !name.empty()) {
      call.results.push_back(ResultUse::kValue);
      call.outputs.push_back({name, type, i});
    } else {
      fail_import(path_, "{}: result {} has a kind opara cannot bind ({})", call.where, i, static_cast<int>(out.tag()));
    }
  }

  void add_to_graph(const c10::OperatorHandle& op, NodeCall& call) {
    const c10::FunctionSchema& schema = op.schema();
    std::vector<std::string> types;
    for (const NodeOutput& output : call.outputs) types.push_back(output.type);
    const bool copies = copies_its_input(schema.operator_name().name, call);
    std::uint32_t flags = node_flags(schema.operator_name().name, &schema, false);
    if (copies) flags &= ~std::uint32_t{kView};
    const NodeId id =
        graph_.add_node(schema.operator_name().name, call.inputs, std::move(types), flags,
                        std::make_shared<DispatcherNodeOp>(op, std::move(call.slots), std::move(call.results)));
    graph_.set_source(id, call.source, std::move(call.constants));
    const auto& values = graph_.node(id).outputs;
    for (std::size_t i = 0; i < values.size(); ++i) {
      names_.values[call.outputs[i].name] = values[i];
      graph_.set_value_name(values[i], call.outputs[i].name);
      if (!copies) record_views(schema, values[i], schema.returns()[call.outputs[i].result], call);
    }
  }

  // An operator whose schema says its result aliases the input, recorded with another device or
  // dtype than its input's (`to` the GPU, `to` float64): then it made a fresh tensor, and a write
  // into the result (a counter moved to the GPU, then add_) writes no input.
  bool copies_its_input(std::string_view kind, const NodeCall& call) const {
    if (!op_traits(kind).may_copy || !names_.recorded || call.inputs.empty() || call.outputs.size() != 1) return false;
    const auto input = names_.recorded->find(graph_.value(call.inputs.front()).name);
    const auto output = names_.recorded->find(call.outputs.front().name);
    if (input == names_.recorded->end() || output == names_.recorded->end()) return false;
    const ep::Device& from = input->second.get_device();
    const ep::Device& to = output->second.get_device();
    return from.get_type() != to.get_type() || from.get_index() != to.get_index() ||
           input->second.get_dtype() != output->second.get_dtype();
  }

  // A result annotated Tensor(a) is a view of the argument annotated with the same set.
  static void record_views(const c10::FunctionSchema& schema, ValueId value, const c10::Argument& result,
                           NodeCall& call) {
    if (!result.alias_info()) return;
    for (std::size_t a = 0; a < schema.arguments().size(); ++a) {
      const auto& formal = schema.arguments()[a];
      if (!formal.alias_info() || formal.alias_info()->beforeSets() != result.alias_info()->beforeSets()) continue;
      for (std::size_t k = call.runtime_range[a].first; k < call.runtime_range[a].second; ++k) {
        call.aliasing.views.emplace_back(value, call.inputs[k]);
      }
    }
  }

  const std::string& path_;
  ExportedNames& names_;
  Graph& graph_;
};

}  // namespace

NodeAliasing add_exported_node(const ep::Node& node, const std::string& target, const std::string& path,
                               ExportedNames& names, Graph& graph) {
  return NodeImporter(path, names, graph).add(node, target);
}

}  // namespace opara
