#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "opara/export.h"

namespace opara {

using NodeId = std::int32_t;
using ValueId = std::int32_t;
inline constexpr NodeId kNoNode = -1;

class NodeOp;  // how a node executes (csrc/exec/node_op.h); opaque here so this header needs no torch

// Properties a later stage asks about a node; set by the importers from the op's schema and the
// op table (csrc/graph/op_table.cpp).
enum NodeFlag : std::uint32_t {
  kLaunchesKernel = 1u << 0,  // estimate: does real work on the device (not a view or metadata op)
  kView = 1u << 1,            // returns an alias of an input
  kWritesInput = 1u << 2,     // mutates one of its inputs in place
  kNotCapturable = 1u << 3,   // synchronises with the host: cannot live inside a CUDA graph
};

enum class EdgeKind : std::uint8_t {
  kData,   // the target reads a value the source produced
  kOrder,  // no value flows, but in-place writes and aliasing views fix the order
};

struct Edge {
  NodeId from;
  NodeId to;
  EdgeKind kind;
};

// An input of a node is a value of the graph; constant arguments are folded into the node's op
// and shown in `constants`.
struct Node {
  NodeId id = kNoNode;
  std::string kind;              // "aten::conv2d", "prim::TupleConstruct", ...
  std::vector<ValueId> inputs;   // runtime arguments, in the operator's argument order
  std::vector<ValueId> outputs;  // one per result, in order
  std::string source;            // "model.py:42" or the module scope; empty when unknown
  std::string constants;         // printable summary of the folded constant arguments
  std::uint32_t flags = 0;
  // Program order is kept: predecessors in argument order (then ordering edges), successors in
  // the order the model runs them. Opara's "first successor" rule depends on it.
  std::vector<NodeId> predecessors;
  std::vector<NodeId> successors;
  std::shared_ptr<const NodeOp> op;  // null for graphs written by hand in tests
  // The stream a plan gave this node already (a graph rewritten so that each of Inductor's regions
  // is one node keeps the streams of the plan that cut the regions); -1: none. make_plan keeps
  // these where every kernel node has one.
  int planned_stream = -1;

  [[nodiscard]] bool has(NodeFlag flag) const { return (flags & flag) != 0; }
};

struct Value {
  ValueId id = -1;
  std::string name;
  std::string type;           // "Tensor", "int[]", ...
  NodeId producer = kNoNode;  // kNoNode for graph inputs
  std::vector<NodeId> users;  // in program order; a node that reads it twice appears once
};

// A buffer the model keeps between calls and writes in place (a counter, a cache registered on
// the module): a graph input after the caller's, which compile() feeds itself. `initial` makes its
// value at compile time (an op of no inputs and one tensor result: the value saved in the file).
struct StateBuffer {
  ValueId value = -1;
  std::string name;  // the module's name for it ("layers.0.count")
  std::shared_ptr<const NodeOp> initial;
};

// One dimension of a caller's input as a dynamic-shape export left it: a fixed size, or a symbol
// that any size in [min, max] may take, the same wherever it appears.
struct InputSize {
  std::int64_t fixed = -1;  // -1: symbolic
  std::string symbol;       // "s27"
  std::int64_t min = 0;
  std::int64_t max = std::numeric_limits<std::int64_t>::max();
};

// A condition on the sizes of the caller's inputs that a dynamic-shape program was exported under:
// `code` as the export wrote it ("((-1) + L['x'].size()[0]) != 1"), `script` the same over
// `inputs`, the caller's inputs in order ("((-1) + inputs[0].size()[0]) != 1").
struct InputGuard {
  std::string code;
  std::string script;
};

// The operator DAG of one model. Nodes are added in program order and every edge goes from an
// earlier node to a later one, so the graph is acyclic by construction and node ids are a
// topological order.
class OPARA_API Graph {
 public:
  ValueId add_input(std::string name, std::string type = "Tensor");
  // A graph input that holds state (StateBuffer); after every input add_input made, and after
  // the state buffers added before it.
  ValueId add_state(std::string name, std::shared_ptr<const NodeOp> initial);
  // Adds a node reading `inputs` and producing `output_types.size()` new values; data edges from
  // the producers of the inputs are added with it.
  NodeId add_node(std::string kind, std::vector<ValueId> inputs, std::vector<std::string> output_types,
                  std::uint32_t flags = kLaunchesKernel, std::shared_ptr<const NodeOp> op = nullptr);
  // Orders `from` before `to` without a value between them; from < to. No-op if they are
  // already adjacent.
  void add_order_edge(NodeId from, NodeId to);
  void add_output(ValueId value);
  void set_value_name(ValueId value, std::string name);
  void set_source(NodeId node, std::string source, std::string constants);
  void set_planned_stream(NodeId node, int stream);

  [[nodiscard]] const std::vector<Node>& nodes() const { return nodes_; }
  [[nodiscard]] const Node& node(NodeId id) const;
  [[nodiscard]] const std::vector<Value>& values() const { return values_; }
  [[nodiscard]] const Value& value(ValueId id) const;
  [[nodiscard]] const std::vector<ValueId>& inputs() const { return inputs_; }
  [[nodiscard]] const std::vector<ValueId>& outputs() const { return outputs_; }
  // The state buffers, the last state().size() of inputs(); the caller gives the others.
  [[nodiscard]] const std::vector<StateBuffer>& state() const { return state_; }
  [[nodiscard]] std::size_t caller_input_count() const { return inputs_.size() - state_.size(); }
  [[nodiscard]] const std::vector<Edge>& edges() const { return edges_; }
  [[nodiscard]] std::size_t size() const { return nodes_.size(); }
  [[nodiscard]] bool has_edge(NodeId from, NodeId to) const;

  // The file the graph was read from, for error messages; empty for hand-made graphs.
  std::string source_path;
  // By caller input, each dimension's size, where the program has symbolic sizes (a dynamic-shape
  // export; empty otherwise): the inputs a model is compiled for must fit them (InputSignature).
  std::vector<std::vector<InputSize>> symbolic_input_sizes;
  // The conditions on those sizes the export assumed (its guards), which the inputs must meet too.
  std::vector<InputGuard> input_guards;

  // "node 12 (aten::relu_ at model.py:40)": how every message names a node.
  [[nodiscard]] std::string describe(NodeId id) const;

 private:
  ValueId add_graph_input(std::string name, std::string type);
  void add_edge(NodeId from, NodeId to, EdgeKind kind);

  std::vector<Node> nodes_;
  std::vector<Value> values_;
  std::vector<ValueId> inputs_;
  std::vector<ValueId> outputs_;
  std::vector<Edge> edges_;
  std::vector<StateBuffer> state_;
};

}  // namespace opara
