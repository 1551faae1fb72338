#include "opara/graph.h"

#include <algorithm>

#include <fmt/format.h>

#include "support/internal_assert.h"

namespace opara {
namespace {

// Inserts `id` keeping `list` sorted by node id, which for successors is program order.
void insert_sorted(std::vector<NodeId>& list, NodeId id) {
  list.insert(std::upper_bound(list.begin(), list.end(), id), id);
}

// Node and value ids are handed out by the graph itself: one that is not there is a bug in opara.
void check_node_id(NodeId id, std::size_t node_count) {
  OPARA_ASSERT(id >= 0 && static_cast<std::size_t>(id) < node_count, "no node {} in a graph of {} nodes", id,
               node_count);
}

void check_value_id(ValueId id, std::size_t value_count) {
  OPARA_ASSERT(id >= 0 && static_cast<std::size_t>(id) < value_count, "no value {} in a graph of {} values", id,
               value_count);
}

}  // namespace

ValueId Graph::add_input(std::string name, std::string type) {
  OPARA_ASSERT(state_.empty(), "input {} added after the state buffers", name);
  return add_graph_input(std::move(name), std::move(type));
}

ValueId Graph::add_state(std::string name, std::shared_ptr<const NodeOp> initial) {
  // Any number of state buffers, one after another: only a caller's input may not follow them.
  const ValueId id = add_graph_input(name, "Tensor");
  state_.push_back(StateBuffer{id, std::move(name), std::move(initial)});
  return id;
}

ValueId Graph::add_graph_input(std::string name, std::string type) {
  const auto id = static_cast<ValueId>(values_.size());
  values_.push_back(Value{id, std::move(name), std::move(type), kNoNode, {}});
  inputs_.push_back(id);
  return id;
}

NodeId Graph::add_node(std::string kind, std::vector<ValueId> inputs, std::vector<std::string> output_types,
                       std::uint32_t flags, std::shared_ptr<const NodeOp> op) {
  const auto id = static_cast<NodeId>(nodes_.size());
  Node node;
  node.id = id;
  node.kind = std::move(kind);
  node.flags = flags;
  node.op = std::move(op);
  for (ValueId input : inputs) {
    OPARA_ASSERT(input >= 0 && input < static_cast<ValueId>(values_.size()),
                 "node {} ({}) reads value {} that does not exist", id, node.kind, input);
  }
  node.inputs = std::move(inputs);
  for (auto& type : output_types) {
    const auto value = static_cast<ValueId>(values_.size());
    values_.push_back(Value{value, fmt::format("%{}", value), std::move(type), id, {}});
    node.outputs.push_back(value);
  }
  nodes_.push_back(std::move(node));
  for (ValueId input : nodes_.back().inputs) {
    auto& users = values_[input].users;
    if (users.empty() || users.back() != id) users.push_back(id);
    const NodeId producer = values_[input].producer;
    if (producer != kNoNode && !has_edge(producer, id)) add_edge(producer, id, EdgeKind::kData);
  }
  return id;
}

void Graph::add_order_edge(NodeId from, NodeId to) {
  OPARA_ASSERT(from >= 0 && to < static_cast<NodeId>(nodes_.size()) && from < to,
               "ordering edge {} -> {} must go forward between existing nodes", from, to);
  if (!has_edge(from, to)) add_edge(from, to, EdgeKind::kOrder);
}

void Graph::add_edge(NodeId from, NodeId to, EdgeKind kind) {
  edges_.push_back(Edge{from, to, kind});
  insert_sorted(nodes_[from].successors, to);
  // Data edges arrive in argument order; ordering edges follow them.
  nodes_[to].predecessors.push_back(from);
}

void Graph::add_output(ValueId value) {
  outputs_.push_back(this->value(value).id);
}

void Graph::set_value_name(ValueId value, std::string name) {
  check_value_id(value, values_.size());
  values_[value].name = std::move(name);
}

void Graph::set_source(NodeId node, std::string source, std::string constants) {
  check_node_id(node, nodes_.size());
  nodes_[node].source = std::move(source);
  nodes_[node].constants = std::move(constants);
}

void Graph::set_planned_stream(NodeId node, int stream) {
  check_node_id(node, nodes_.size());
  nodes_[node].planned_stream = stream;
}

const Node& Graph::node(NodeId id) const {
  check_node_id(id, nodes_.size());
  return nodes_[id];
}

const Value& Graph::value(ValueId id) const {
  check_value_id(id, values_.size());
  return values_[id];
}

bool Graph::has_edge(NodeId from, NodeId to) const {
  const auto& successors = node(from).successors;
  return std::binary_search(successors.begin(), successors.end(), to);
}

std::string Graph::describe(NodeId id) const {
  const Node& n = node(id);
  if (n.source.empty()) return fmt::format("node {} ({})", id, n.kind);
  return fmt::format("node {} ({} at {})", id, n.kind, n.source);
}

}  // namespace opara
