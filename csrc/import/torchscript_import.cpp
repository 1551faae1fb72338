// TorchScript import: load -> freeze_module -> Inline -> dead-code elimination -> Graph.
//
// freeze_module only turns attributes into constants; torch::jit::freeze would also fold
// batch norms into convolutions, which changes the numerics, and our reference is the module's
// own forward, bit for bit.
#include "import/torchscript_import.h"

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/serialization/import.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <unordered_map>

#include "exec/first_line.h"
#include "import/container_ops.h"
#include "import/import_errors.h"
#include "import/node_properties.h"
#include "import/script_node_op.h"

namespace opara {
namespace {

using torch::jit::Node;
using torch::jit::Value;

std::string source_of(const Node* node) {
  if (auto location = node->sourceRange().file_line_col()) {
    const auto& [file, line, column] = *location;
    return fmt::format("{}:{}", file, line);
  }
  const std::string scope = node->scopeName();
  return scope;
}

// "aten::relu_ at model.py:12", or the kind alone when the location is unknown.
std::string located(const Node* node) {
  const std::string where = source_of(node);
  const std::string kind = node->kind().toQualString();
  return where.empty() ? kind : kind + " at " + where;
}

class TorchScriptImporter {
 public:
  // From a file, or from an archive in memory (`bytes`; `path` then names it in errors).
  explicit TorchScriptImporter(std::string path, std::shared_ptr<const std::string> bytes = nullptr)
      : path_(std::move(path)), bytes_(std::move(bytes)) {}

  Graph run() {
    torch::jit::Module module = load_module();
    module.eval();
    torch::jit::Module frozen = freeze(module);
    script_graph_ = frozen.get_method("forward").graph();
    torch::jit::Inline(*script_graph_);
    torch::jit::EliminateDeadCode(script_graph_);
    graph_.source_path = path_;
    add_inputs();
    for (Node* node : script_graph_->nodes()) add_node(node);
    add_outputs();
    add_alias_edges();
    return std::move(graph_);
  }

 private:
  torch::jit::Module load_module() {
    try {
      if (!bytes_) return torch::jit::load(path_);
      std::istringstream stream(*bytes_);
      return torch::jit::load(stream);
    } catch (const std::exception& error) {
      const std::string reason = first_line(error);
      if (reason.find("Unknown builtin op") != std::string::npos) {
        fail_import(path_,
                    "the model calls an operator this LibTorch does not register ({}). Load the library that "
                    "defines it before loading the model, or export the model without it",
                    reason);
      }
      fail_import(path_,
                  "not a loadable TorchScript archive ({}). Re-export it with torch.jit.trace or "
                  "torch.jit.script and torch.jit.save, using torch " TORCH_VERSION,
                  reason);
    }
  }

  torch::jit::Module freeze(const torch::jit::Module& module) {
    if (!module.find_method("forward")) fail_import(path_, "the module has no forward() method");
    try {
      return torch::jit::freeze_module(module);
    } catch (const std::exception& error) {
      fail_import(path_,
                  "freezing the module failed ({}). opara needs a module whose attributes do not "
                  "change in forward()",
                  first_line(error));
    }
  }

  void add_inputs() {
    const auto inputs = script_graph_->inputs();
    if (!inputs.empty() && inputs[0]->hasUses()) {
      const Node* user = inputs[0]->uses().front().user;
      const std::string attribute = attribute_path(user);
      if (!attribute.empty()) {
        // Freezing folds every attribute but those forward() writes: this one is state.
        fail_import(path_,
                    "{} reads the module's attribute '{}' after freezing, which keeps only an attribute "
                    "forward() writes (a buffer written in place: a counter, a KV cache). opara keeps such state "
                    "for torch.export programs: compile the module itself with opara.compile (it exports it), or "
                    "a .pt2 written by torch.export.save",
                    located(user), attribute);
      }
      fail_import(path_,
                  "{} still reads the module after freezing. opara needs forward() to use only "
                  "parameters and constants of the module",
                  located(user));
    }
    for (std::size_t i = 1; i < inputs.size(); ++i) {
      // run() takes a list of tensors: an int, a list or a dict argument could not be given.
      if (inputs[i]->type()->kind() != c10::TypeKind::TensorType) {
        fail_import(path_,
                    "forward's argument {} ('{}') is {}; opara passes tensors only. Take each tensor as an "
                    "argument of its own, and make numbers constants or tensors",
                    i - 1, inputs[i]->debugNameBase(), inputs[i]->type()->repr_str());
      }
      values_[inputs[i]] = graph_.add_input(inputs[i]->debugName(), inputs[i]->type()->str());
    }
  }

  // "layers.0.k_cache": the attributes a chain of prim::GetAttr from `node` names, down its first
  // use while it reads a submodule; empty when `node` is not a GetAttr.
  static std::string attribute_path(const Node* node) {
    std::string path;
    while (node != nullptr && node->kind() == c10::prim::GetAttr) {
      path += (path.empty() ? "" : ".") + node->s(c10::attr::name);
      const Value* read = node->output();
      node = read->type()->kind() == c10::TypeKind::ClassType && read->hasUses() ? read->uses().front().user : nullptr;
    }
    return path;
  }

  // Tensors, and tuples, lists and dicts of them: what run() can return as a list of tensors.
  static bool holds_only_tensors(const c10::TypePtr& type) {
    switch (type->kind()) {
      case c10::TypeKind::TensorType: return true;
      case c10::TypeKind::TupleType:
      case c10::TypeKind::ListType:
        return std::all_of(type->containedTypes().begin(), type->containedTypes().end(), holds_only_tensors);
      case c10::TypeKind::DictType: return holds_only_tensors(type->containedType(1));
      default: return false;
    }
  }

  void add_node(Node* node) {
    const auto kind = node->kind();
    if (kind == c10::prim::Constant) {  // folded into the nodes that read it
      auto constant = torch::jit::toIValue(node->output());
      if (!constant) fail_import(path_, "{} holds a constant opara cannot read", located(node));
      constants_[node->output()] = std::move(*constant);
      return;
    }
    if (fold_constant_container(node)) return;
    check_runs_node_by_node(node);
    torch::jit::Operation operation = operation_of(node);
    std::vector<std::optional<c10::IValue>> arguments;
    std::vector<ValueId> inputs;
    std::string constants;
    for (std::size_t i = 0; i < node->inputs().size(); ++i) {
      Value* input = node->inputs()[i];
      if (auto constant = constants_.find(input); constant != constants_.end()) {
        constants += fmt::format("{}{}={}", constants.empty() ? "" : ", ", i, constant_summary(constant->second));
        arguments.emplace_back(constant->second);
      } else {
        inputs.push_back(values_.at(input));
        arguments.emplace_back(std::nullopt);
      }
    }
    std::vector<std::string> output_types;
    for (const Value* output : node->outputs()) output_types.push_back(output->type()->str());
    auto op = std::make_shared<ScriptNodeOp>(script_graph_, std::move(operation), std::move(arguments));
    const NodeId id = graph_.add_node(
        kind.toQualString(), std::move(inputs), std::move(output_types),
        node_flags(kind.toQualString(), node->maybeSchema(),
                   std::any_of(node->outputs().begin(), node->outputs().end(),
                               [](const Value* v) { return v->type()->kind() == c10::TypeKind::TensorType; })),
        std::move(op));
    graph_.set_source(id, source_of(node), std::move(constants));
    script_nodes_.push_back(node);
    for (std::size_t i = 0; i < node->outputs().size(); ++i) {
      const ValueId value = graph_.node(id).outputs[i];
      graph_.set_value_name(value, node->outputs()[i]->debugName());
      values_[node->outputs()[i]] = value;
    }
  }

  // Refuses what only the TorchScript interpreter can run: control flow, prints, method calls.
  void check_runs_node_by_node(Node* node) const {
    const auto kind = node->kind();
    if (kind == c10::prim::If || kind == c10::prim::Loop) {
      fail_import(path_,
                  "{}: data-dependent control flow survives freezing. opara runs straight-line "
                  "graphs: trace the model (torch.jit.trace records the path taken) or move the branch out "
                  "of forward()",
                  located(node));
    }
    if (kind == c10::prim::Print || kind == c10::aten::warn) {
      fail_import(path_,
                  "{} prints from inside forward(), which only the TorchScript interpreter can do. Remove the "
                  "print or warning, or trace the model (tracing leaves them out)",
                  located(node));
    }
    if (!node->blocks().empty() || kind == c10::prim::CallMethod || kind == c10::prim::CallFunction ||
        kind == c10::prim::GetAttr || kind == c10::prim::SetAttr) {
      fail_import(path_,
                  "{} cannot be executed node by node. Trace the model with torch.jit.trace so "
                  "that it holds only operators",
                  located(node));
    }
  }

  // The interpreter's operation for `node` (ours for the list and tuple prim nodes).
  torch::jit::Operation operation_of(Node* node) const {
    try {
      if (auto operation = container_operation(node)) return std::move(*operation);
      return node->getOperation();
    } catch (const std::exception& error) {
      fail_import(path_,
                  "{} has no implementation in this LibTorch ({}). Load the library that "
                  "defines it before loading the model, or export without it",
                  located(node), first_line(error));
    }
  }

  // A list or tuple built only of constants (conv strides, view sizes) is itself a constant: fold
  // it too, so that it costs no node and no edge. Not a list that a later node changes
  // (aten::append on `l = []`): folded, every run would append to the one shared list.
  bool fold_constant_container(Node* node) {
    if (node->kind() != c10::prim::ListConstruct && node->kind() != c10::prim::TupleConstruct) return false;
    if (node->kind() == c10::prim::ListConstruct && is_written_later(node->output())) return false;
    torch::jit::Stack stack;
    for (Value* input : node->inputs()) {
      auto constant = constants_.find(input);
      if (constant == constants_.end()) return false;
      stack.push_back(constant->second);
    }
    (*container_operation(node))(stack);
    constants_[node->output()] = stack.back();
    return true;
  }

  // Whether a node takes `value` as an argument its schema marks written (`t[](a!) self`).
  static bool is_written_later(const Value* value) {
    for (const torch::jit::Use& use : value->uses()) {
      const c10::FunctionSchema* schema = use.user->maybeSchema();
      if (schema == nullptr || use.offset >= schema->arguments().size()) continue;
      if (schema->is_mutable({c10::SchemaArgType::input, use.offset})) return true;
    }
    return false;
  }

  // A constant returned straight from forward() gets a node of its own, so that every output
  // is a value some node or input defines.
  void add_outputs() {
    for (Value* output : script_graph_->outputs()) {
      if (!holds_only_tensors(output->type())) {
        fail_import(path_,
                    "forward returns {}; opara returns tensors only, and would drop the rest. Return "
                    "numbers as tensors (torch.tensor) or leave them out",
                    output->type()->repr_str());
      }
      if (constants_.count(output) && !values_.count(output)) {
        auto constant = constants_.at(output);
        auto op = std::make_shared<ScriptNodeOp>(
            script_graph_, [constant](torch::jit::Stack& stack) { stack.push_back(constant); },
            std::vector<std::optional<c10::IValue>>{});
        const NodeId id = graph_.add_node("prim::Constant", {}, {output->type()->str()}, 0, std::move(op));
        graph_.set_source(id, "", constant_summary(constant));
        values_[output] = graph_.node(id).outputs[0];
        script_nodes_.push_back(output->node());
      }
      graph_.add_output(values_.at(output));
    }
  }

  // Note [Ordering edges]: a node that writes memory must stay after every earlier node that
  // reads or writes memory it may alias, and before every later one. Alias analysis answers
  // "may w write what x touches?" for each writer w; the edge follows program order.
  void add_alias_edges() {
    std::unordered_map<const Node*, Node*> twin;
    const std::shared_ptr<torch::jit::Graph> analysed = graph_for_alias_analysis(twin);
    torch::jit::AliasDb alias_db(analysed, /*isFrozen=*/true);
    std::vector<Node*> nodes;
    for (const Node* node : script_nodes_) nodes.push_back(twin.at(node));
    std::vector<NodeId> writers;
    for (NodeId id = 0; id < static_cast<NodeId>(nodes.size()); ++id) {
      Node* node = nodes[id];
      if (node->kind() != c10::prim::Constant && alias_db.isMutable(node)) writers.push_back(id);
    }
    for (NodeId writer : writers) {
      for (NodeId other = 0; other < static_cast<NodeId>(nodes.size()); ++other) {
        if (other == writer) continue;
        Node* node = nodes[other];
        torch::jit::ValueSet touched(node->inputs().begin(), node->inputs().end());
        touched.insert(node->outputs().begin(), node->outputs().end());
        if (!alias_db.writesToAlias(nodes[writer], touched)) continue;
        if (other < writer) {
          graph_.add_order_edge(other, writer);
        } else {
          graph_.add_order_edge(writer, other);
        }
      }
    }
  }

  // Note [Unsafe chunks]: aten::unsafe_chunk returns views of its input but declares no aliasing,
  // so AliasDb gives the pieces in its list the wildcard alias set, and an in-place op on one
  // piece is ordered against every tensor that may alias a wildcard: an LSTM cell's in-place
  // sigmoid_ on its gates serialised every head of a multi-head model. Alias analysis runs on a
  // copy of the graph where `unsafe_chunk` + `prim::ListUnpack` with a constant chunk count is one
  // prim::ConstantChunk, whose pieces AliasDb knows to alias the input and nothing else. The
  // model itself still runs the original ops. `twin` maps each node to the node standing for it
  // in the copy.
  std::shared_ptr<torch::jit::Graph> graph_for_alias_analysis(std::unordered_map<const Node*, Node*>& twin) const {
    std::shared_ptr<torch::jit::Graph> copy = script_graph_->copy();
    auto original = script_graph_->nodes().begin();
    auto copied = copy->nodes().begin();
    for (; original != script_graph_->nodes().end(); ++original, ++copied) twin[*original] = *copied;
    static const c10::Symbol kUnsafeChunk = c10::Symbol::fromQualString("aten::unsafe_chunk");
    for (Node* chunk : script_graph_->nodes()) {
      if (chunk->kind() != kUnsafeChunk || chunk->output()->uses().size() != 1) continue;
      Node* unpack = chunk->output()->uses()[0].user;
      const std::optional<std::int64_t> chunks = torch::jit::constant_as<std::int64_t>(chunk->input(1));
      const std::optional<std::int64_t> dim = torch::jit::constant_as<std::int64_t>(chunk->input(2));
      if (unpack->kind() != c10::prim::ListUnpack || !chunks || !dim) continue;
      Node* copied_chunk = twin.at(chunk);
      Node* copied_unpack = twin.at(unpack);
      Node* together =
          copy->create(c10::prim::ConstantChunk, {copied_chunk->input(0)}, copied_unpack->outputs().size());
      together->i_(c10::attr::chunks, *chunks)->i_(c10::attr::dim, *dim);
      together->insertBefore(copied_chunk);
      for (std::size_t i = 0; i < copied_unpack->outputs().size(); ++i) {
        together->output(i)->setType(copied_unpack->output(i)->type());
        copied_unpack->output(i)->replaceAllUsesWith(together->output(i));
      }
      copied_unpack->destroy();
      copied_chunk->destroy();
      twin[chunk] = together;
      twin[unpack] = together;
    }
    return copy;
  }

  std::string path_;
  std::shared_ptr<const std::string> bytes_;
  std::shared_ptr<torch::jit::Graph> script_graph_;
  Graph graph_;
  std::unordered_map<const Value*, ValueId> values_;
  std::unordered_map<const Value*, c10::IValue> constants_;  // prim::Constant and folded containers
  std::vector<Node*> script_nodes_;                          // by NodeId
};

}  // namespace

Graph import_torchscript(const std::string& path) {
  return TorchScriptImporter(path).run();
}

Graph import_torchscript_bytes(std::shared_ptr<const std::string> archive, const std::string& name) {
  return TorchScriptImporter(name, std::move(archive)).run();
}

}  // namespace opara
