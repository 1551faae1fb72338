// A program's graph with Inductor's compiled regions as nodes, planned once (compiled_regions.h).
#include "opara/compiled_regions.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "import/dispatcher_node_op.h"
#include "import/import_errors.h"
#include "opara/plan.h"

namespace opara {
namespace {

constexpr std::string_view kCallersRegion = "opara::aoti_region";
constexpr std::string_view kWrittenInRegion = "opara::written_in_region";

// The state a region wrote in place, as the value its write made: the state itself, handed on.
class WrittenStateOp final : public NodeOp {
 public:
  void run(std::vector<c10::IValue>& /*stack*/) const override {}
  [[nodiscard]] std::shared_ptr<const NodeOp> to(c10::Device /*device*/) const override {
    return std::make_shared<WrittenStateOp>();
  }
};

// One compiled region: the op and key its node calls, what it reads (graph values or constants)
// and the values of its nodes it gives out, by the old graph's ids.
struct RegionCall {
  int region = kNoRegion;
  std::optional<c10::OperatorHandle> op;  // set once the description names it
  std::shared_ptr<const NodeOp> own_op;   // or the caller's runner (RegionOps), which takes the inputs alone
  std::int64_t key = 0;
  std::vector<ValueId> inputs;  // -1 where the input is the constant at the same index of `constants`
  std::vector<at::Tensor> constants;
  std::vector<ValueId> outputs;
  std::vector<NodeId> members;  // the region's nodes, by id
};

class RegionsAsNodes {
 public:
  RegionsAsNodes(const Graph& graph, std::string_view description, const std::vector<at::Tensor>& constants,
                 RegionOps region_ops)
      : graph_(graph), region_ops_(std::move(region_ops)) {
    try {
      const nlohmann::json json = nlohmann::json::parse(description);
      plan_ = plan_of(json.at("plan"));
      if (plan_.stream_of.size() != graph_.size() || plan_.region_of.size() != graph_.size()) {
        fail_import(graph_.source_path, "the compiled regions' plan is for a graph of {} nodes, with regions, not {}",
                    plan_.stream_of.size(), graph_.size());
      }
      require_valid(graph_, plan_);
      for (std::size_t i = 0; i < graph_.values().size(); ++i) by_name_.emplace(graph_.values()[i].name, i);
      call_of_region_.assign(plan_.region_count, -1);
      for (const nlohmann::json& region : json.at("regions")) calls_.push_back(call(region, constants));
    } catch (const nlohmann::json::exception& error) {
      fail_import(graph_.source_path, "the compiled regions' description is not valid ({})", error.what());
    } catch (const std::out_of_range& error) {  // a constant's index past `constants`
      fail_import(graph_.source_path, "the compiled regions' description is not valid ({})", error.what());
    }
  }

  Graph rewritten() {
    const Outside outside = outside_the_regions();
    for (const RegionCall& call : calls_) check_outputs(call, outside.read);
    Graph out;
    out.source_path = graph_.source_path;
    local_.assign(graph_.values().size(), -1);
    for (std::size_t i = 0; i < graph_.caller_input_count(); ++i) {
      const Value& input = graph_.value(graph_.inputs()[i]);
      local_[input.id] = out.add_input(input.name, input.type);
    }
    for (const StateBuffer& state : graph_.state()) local_[state.value] = out.add_state(state.name, state.initial);
    new_of_.assign(graph_.size(), kNoNode);
    for (NodeId id : plan_.launch_order) {
      const int region = plan_.region_of[id];
      const int call = region == kNoRegion ? -1 : call_of_region_[region];
      if (call >= 0) {
        if (new_of_[calls_[call].members.front()] == kNoNode) add_region_node(calls_[call], out);
        new_of_[id] = new_of_[calls_[call].members.front()];
      } else if (outside.kept[id]) {
        copy_node(id, out);
      }
    }
    add_order_edges(out);
    for (ValueId output : graph_.outputs()) out.add_output(local_[output]);
    return out;
  }

 private:
  [[noreturn]] void fail(int region, const std::string& problem) const {
    fail_import(graph_.source_path, "compiled region {}: {}; compile it with kernels='aten'", region, problem);
  }

  Plan plan_of(const nlohmann::json& json) const {
    try {
      return plan_from_json(json.dump());
    } catch (const Error& error) {
      fail_import(graph_.source_path, "the compiled regions' plan: {}", error.what());
    }
  }

  ValueId named(int region, const std::string& name) const {
    auto found = by_name_.find(name);
    if (found == by_name_.end()) fail(region, fmt::format("the program has no value named {}", name));
    return static_cast<ValueId>(found->second);
  }

  RegionCall call(const nlohmann::json& json, const std::vector<at::Tensor>& constants) {
    RegionCall call;
    call.region = json.at("region").get<int>();
    if (call.region < 0 || call.region >= plan_.region_count || call_of_region_[call.region] >= 0) {
      fail(call.region, fmt::format("not one of the plan's {} regions, or listed twice", plan_.region_count));
    }
    const std::string op = json.at("op").get<std::string>();
    call.key = json.at("key").get<std::int64_t>();
    if (op == kCallersRegion) {
      const auto found = region_ops_.find(call.key);
      if (found == region_ops_.end() || !found->second) {
        fail(call.region, fmt::format("no runner was given for its key {}", call.key));
      }
      call.own_op = found->second;
    } else if (op != "opara::region" && op != "opara::native_region") {
      fail(call.region, fmt::format("unknown op {}", op));
    } else {
      call.op = c10::Dispatcher::singleton().findSchema({op, ""});
      if (!call.op) {
        fail(call.region, fmt::format("{} is not registered (the Python package registers its regions' ops: import "
                                      "opara where the model runs)",
                                      op));
      }
    }
    for (NodeId id = 0; id < static_cast<NodeId>(graph_.size()); ++id) {
      if (plan_.region_of[id] == call.region) call.members.push_back(id);
    }
    if (call.members.empty()) fail(call.region, "the plan gives it no nodes");
    for (const nlohmann::json& input : json.at("inputs")) {
      if (input.contains("constant")) {
        if (call.own_op) fail(call.region, "a runner given by the caller takes no constants");
        call.inputs.push_back(-1);
        call.constants.push_back(constants.at(input.at("constant").get<std::size_t>()));
        continue;
      }
      const ValueId value = named(call.region, input.at("value").get<std::string>());
      if (member(call, graph_.value(value).producer))
        fail(call.region, fmt::format("it reads its own value {}", graph_.value(value).name));
      call.inputs.push_back(value);
      call.constants.emplace_back();
    }
    for (const nlohmann::json& output : json.at("outputs")) {
      const ValueId value = named(call.region, output.get<std::string>());
      if (!member(call, graph_.value(value).producer))
        fail(call.region, fmt::format("it does not make {}", output.get<std::string>()));
      call.outputs.push_back(value);
    }
    call_of_region_[call.region] = static_cast<int>(calls_.size());
    return call;
  }

  bool member(const RegionCall& call, NodeId node) const {
    return node != kNoNode && plan_.region_of[node] == call.region;
  }

  bool called(NodeId node) const {
    const int region = plan_.region_of[node];
    return region != kNoRegion && call_of_region_[region] >= 0;
  }

  // What runs outside the compiled regions, by node: every kernel node, and the kernel-free nodes
  // something that runs reads (node ids are a topological order); and, by value, what is read
  // there, by a region or by the caller.
  struct Outside {
    std::vector<std::uint8_t> kept;
    std::vector<std::uint8_t> read;
  };

  Outside outside_the_regions() const {
    Outside outside{std::vector<std::uint8_t>(graph_.size(), 0), std::vector<std::uint8_t>(graph_.values().size(), 0)};
    std::vector<std::uint8_t>& read = outside.read;
    for (ValueId output : graph_.outputs()) read[output] = 1;
    for (const RegionCall& call : calls_) {
      for (ValueId input : call.inputs) {
        if (input >= 0) read[input] = 1;
      }
    }
    for (NodeId id = static_cast<NodeId>(graph_.size()) - 1; id >= 0; --id) {
      const Node& node = graph_.node(id);
      if (called(id)) continue;
      const bool runs = node.has(kLaunchesKernel) || node.has(kWritesInput) || node.has(kNotCapturable);
      if (!runs && std::none_of(node.outputs.begin(), node.outputs.end(), [&](ValueId v) { return read[v]; })) {
        continue;
      }
      outside.kept[id] = 1;
      for (ValueId input : node.inputs) read[input] = 1;
    }
    return outside;
  }

  // Whether member `id` writes, in place, a value made outside the region: state (a KV cache),
  // which the region writes where it lives. (A write of its own intermediate is the region's own.)
  bool writes_from_outside(const RegionCall& call, NodeId id) const {
    const Node& node = graph_.node(id);
    return node.has(kWritesInput) && !node.inputs.empty() && !member(call, graph_.value(node.inputs.front()).producer);
  }

  // Every value of the region read outside it is among its outputs, but the state it writes in
  // place, which is no output (the region writes it where it lives) and which a node of its own
  // hands on (add_written_state).
  void check_outputs(const RegionCall& call, const std::vector<std::uint8_t>& read) const {
    for (NodeId id : call.members) {
      if (writes_from_outside(call, id)) {
        for (ValueId value : graph_.node(id).outputs) {
          if (std::find(call.outputs.begin(), call.outputs.end(), value) != call.outputs.end()) {
            fail(call.region, fmt::format("it gives out {}, the state it writes in place", graph_.value(value).name));
          }
        }
        continue;
      }
      for (ValueId value : graph_.node(id).outputs) {
        if (read[value] && std::find(call.outputs.begin(), call.outputs.end(), value) == call.outputs.end()) {
          fail(call.region,
               fmt::format("{} is read outside it but is not among its outputs", graph_.value(value).name));
        }
      }
    }
  }

  // The node's op: the caller's runner, or a dispatcher call of op(key, inputs) (constants in the list).
  std::shared_ptr<const NodeOp> region_op(const RegionCall& call, const ArgumentSlot& list) const {
    if (call.own_op) return call.own_op;
    ArgumentSlot key;
    key.constant = c10::IValue(call.key);
    return std::make_shared<DispatcherNodeOp>(*call.op, std::vector<ArgumentSlot>{key, list},
                                              std::vector<ResultUse>{ResultUse::kUnpackList});
  }

  void add_region_node(const RegionCall& call, Graph& out) {
    ArgumentSlot list;
    list.kind = ArgumentSlot::Kind::kTensorList;
    std::vector<ValueId> inputs;
    for (std::size_t i = 0; i < call.inputs.size(); ++i) {
      if (call.inputs[i] < 0) {
        list.positions.push_back(ArgumentSlot::kListConstant);
        continue;
      }
      if (local_[call.inputs[i]] < 0) {
        fail(call.region, fmt::format("it reads {} before the plan makes it", graph_.value(call.inputs[i]).name));
      }
      list.positions.push_back(static_cast<int>(inputs.size()));
      inputs.push_back(local_[call.inputs[i]]);
    }
    if (std::any_of(call.inputs.begin(), call.inputs.end(), [](ValueId v) { return v < 0; })) {
      list.list_constants = call.constants;
    }
    const std::string kind = call.own_op ? std::string(kCallersRegion) : call.op->schema().operator_name().name;
    const NodeId id = out.add_node(kind, std::move(inputs), std::vector<std::string>(call.outputs.size(), "Tensor"),
                                   kLaunchesKernel, region_op(call, list));
    const Node& first = graph_.node(call.members.front());
    out.set_source(id, first.source,
                   fmt::format("key={}, region {} of {} nodes from {}", call.key, call.region, call.members.size(),
                               graph_.describe(first.id)));
    out.set_planned_stream(id, plan_.stream_of[first.id]);
    for (std::size_t k = 0; k < call.outputs.size(); ++k) {
      local_[call.outputs[k]] = out.node(id).outputs[k];
      out.set_value_name(local_[call.outputs[k]], graph_.value(call.outputs[k]).name);
    }
    new_of_[first.id] = id;
    for (NodeId member : call.members) {
      if (writes_from_outside(call, member)) add_written_state(call, member, id, out);
    }
  }

  // The region writes the state `writer` wrote (its first input) where it lives: the value the
  // write made is that state, handed on after the region by a node that launches nothing and
  // says the write (kWritesInput), so that the analyses of written inputs see it (UndoWrites,
  // graph sets) and every reader of the new value comes after the region.
  void add_written_state(const RegionCall& call, NodeId writer, NodeId region_node, Graph& out) {
    const Node& write = graph_.node(writer);
    if (write.outputs.size() != 1) {
      fail(call.region, fmt::format("{} writes in place but makes other than one value", graph_.describe(writer)));
    }
    const ValueId state = local_[write.inputs.front()];
    if (state < 0) fail(call.region, fmt::format("it writes {} before the plan makes it", graph_.describe(writer)));
    const NodeId written = out.add_node(std::string(kWrittenInRegion), {state}, {graph_.value(write.outputs[0]).type},
                                        kWritesInput, std::make_shared<WrittenStateOp>());
    out.set_source(written, write.source, fmt::format("{} in region {}", write.kind, call.region));
    out.add_order_edge(region_node, written);
    local_[write.outputs[0]] = out.node(written).outputs[0];
    out.set_value_name(local_[write.outputs[0]], graph_.value(write.outputs[0]).name);
  }

  void copy_node(NodeId id, Graph& out) {
    const Node& node = graph_.node(id);
    std::vector<ValueId> inputs;
    for (ValueId input : node.inputs) {
      if (local_[input] < 0) {
        fail_import(graph_.source_path, "{} reads {} before the compiled regions' plan makes it", graph_.describe(id),
                    graph_.value(input).name);
      }
      inputs.push_back(local_[input]);
    }
    std::vector<std::string> types;
    for (ValueId output : node.outputs) types.push_back(graph_.value(output).type);
    const NodeId copy = out.add_node(node.kind, std::move(inputs), std::move(types), node.flags, node.op);
    out.set_source(copy, node.source, node.constants);
    out.set_planned_stream(copy, plan_.stream_of[id]);
    for (std::size_t k = 0; k < node.outputs.size(); ++k) {
      local_[node.outputs[k]] = out.node(copy).outputs[k];
      out.set_value_name(local_[node.outputs[k]], graph_.value(node.outputs[k]).name);
    }
    new_of_[id] = copy;
  }

  // The nodes that stand for `node` in the new graph: itself or its region's node, or, for a
  // kernel-free node that went, whatever stands for its readers (a region recomputes it).
  void standing_for(NodeId node, std::vector<NodeId>& found) const {
    if (new_of_[node] != kNoNode) {
      found.push_back(new_of_[node]);
      return;
    }
    for (ValueId value : graph_.node(node).outputs) {
      for (NodeId user : graph_.value(value).users) standing_for(user, found);
    }
  }

  // The old graph's ordering edges (in-place writes after the reads of the old value), between
  // whatever stands for their ends.
  void add_order_edges(Graph& out) const {
    for (const Edge& edge : graph_.edges()) {
      if (edge.kind != EdgeKind::kOrder) continue;
      std::vector<NodeId> from;
      std::vector<NodeId> to;
      standing_for(edge.from, from);
      standing_for(edge.to, to);
      for (NodeId a : from) {
        for (NodeId b : to) {
          if (a == b) continue;
          if (a > b)
            fail_import(graph_.source_path, "the compiled regions' plan orders {} after {}, which must come first",
                        out.describe(a), out.describe(b));
          out.add_order_edge(a, b);
        }
      }
    }
  }

  const Graph& graph_;
  RegionOps region_ops_;
  Plan plan_;
  std::unordered_map<std::string, std::size_t> by_name_;
  std::vector<RegionCall> calls_;
  std::vector<int> call_of_region_;
  std::vector<ValueId> local_;  // by old value: the new graph's
  std::vector<NodeId> new_of_;  // by old node: the new graph's node (kNoNode: gone)
};

}  // namespace

Graph with_compiled_regions(const Graph& graph, std::string_view description,
                            const std::vector<at::Tensor>& constants) {
  return RegionsAsNodes(graph, description, constants, {}).rewritten();
}

Graph with_region_runners(const Graph& graph, std::string_view description, const RegionOps& region_ops) {
  return RegionsAsNodes(graph, description, {}, region_ops).rewritten();
}

}  // namespace opara
