#pragma once

// Plans: which stream each node runs on, in what order launches go, and the events between streams;
// and the costs (Alg. 2's resource demands and compute/memory classes) that order them.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "opara/export.h"
#include "opara/graph.h"

namespace opara {

// Stream of a node that launches no kernel (views, shape and container ops): such nodes run on the
// host in launch order, open no stream and cost no event.
inline constexpr int kNoStream = -1;

// Region of a node that launches no kernel: whoever compiles regions recomputes it where it is used.
inline constexpr int kNoRegion = -1;

// A region's share below which it is merged into a neighbour (PlanOptions::region_min_share).
inline constexpr double kDefaultRegionMinShare = 0.1;

// Which stream each node runs on.
enum class StreamPolicy : std::uint8_t {
  kOpara,          // Opara Alg. 1: inherit the stream of a predecessor of which the node is the first successor
  kOparaUnhanded,  // the published repository's later rule: the first predecessor that has not handed its stream on
  kNimble,         // Nimble: chains covering the transitive reduction, then paths of chains by reachability
  kSingle,         // one stream: the sequential CUDA graph
  // Peers' automatic schedulers, as their code does them (PlanOptions::max_streams: their stream
  // count, else their own default):
  kTrtllm,      // TensorRT-LLM's multi-stream pass: a list schedule by weighted distance to the output, 3 streams
  kTorchsched,  // apex's torchsched: the longest path on one stream, the rest round-robin over 7 more
};

// In which order the host launches the nodes.
enum class OrderPolicy : std::uint8_t {
  kTopological,  // program order
  kOpara,        // Opara Alg. 2: alternate memory- and compute-bound ready nodes, smallest demand first
  kTrtllm,       // TensorRT-LLM's list schedule: the ready node of largest weighted distance to the output first
};

// What an operator is bound by on the GPU; decides which of Alg. 2's ready lists it joins.
enum class OpClass : std::uint8_t { kCompute, kMemory };

// What the launch order needs to know of a node: from a profile, or estimated from shapes.
struct NodeCost {
  OpClass op_class = OpClass::kMemory;
  double demand = 0;  // resource demand; only comparisons between nodes of one graph matter
};

// What a stream's work must pay for (PlanOptions::payoff), in the units of the plan's costs: a
// stream whose nodes' costs, each counted as at least `kernel_floor`, sum below `event_pair` times
// the cross-stream dependencies it has is merged into the stream it was forked from. Zero: never.
struct StreamPayoff {
  double event_pair = 0;    // an event recorded on one stream and waited on by another
  double kernel_floor = 0;  // the least any kernel costs, however little it moves
};

// The payoff for costs estimated from shapes (bytes at the roofline, estimate_costs) on a GPU, at
// about 3.35 TB/s (an H100's HBM3): a kernel in a CUDA graph takes about 3 us at the least (10 MB)
// and an event pair about 1 us (3.35 MB). Constants until a GPU measures them.
inline constexpr StreamPayoff kShapeCostPayoff{3.35e6, 1.0e7};

struct PlanOptions {
  StreamPolicy streams = StreamPolicy::kOpara;
  OrderPolicy order = OrderPolicy::kOpara;
  // 0: as many as the policy opens; past the cap streams are merged, and the merged plan is
  // launched in the order a list schedule of its streams starts the nodes (not the order policy's,
  // which ordered them for more streams). The peers' policies (kTrtllm, kTorchsched) open this
  // many streams at most, as their own stream count.
  int max_streams = 0;
  // Regions (Plan::region_of): runs of one stream's nodes with cross-stream dependencies only at
  // their edges, for another compiler to fuse; one whose cost is below region_min_share of the
  // largest that can run beside it (or beside which nothing runs) is merged into a neighbour.
  bool regions = false;
  double region_min_share = kDefaultRegionMinShare;
  // Streams that cannot pay for their events are merged before the cap (compile() on CUDA sets
  // kShapeCostPayoff when the costs come from shapes); zero: the policy's streams stand.
  StreamPayoff payoff{};
};

// A schedule for one graph: plain data, computed without a GPU, checked by validate() and
// executed by the CPU parallel executor and the CUDA graph capturer alike.
//
// Execution model: the host walks `launch_order`; before a node it waits on the events of the
// nodes in `waits[node]`, then launches the node on `stream_of[node]`, then records the node's
// event when `records[node]`. Each stream runs its nodes in launch order.
struct OPARA_API Plan {
  StreamPolicy stream_policy = StreamPolicy::kOpara;
  OrderPolicy order_policy = OrderPolicy::kTopological;
  int max_streams = 0;
  std::string cost_source;  // "profile", "shapes" or "none": where the demands came from

  int stream_count = 0;
  std::vector<int> stream_of;              // by node id; kNoStream for nodes that launch no kernel
  std::vector<NodeId> launch_order;        // every node once, topological
  std::vector<std::vector<NodeId>> waits;  // by node id: nodes whose events it waits on, on its stream
  std::vector<std::uint8_t> records;       // by node id: 1 when an event is recorded after it
  std::size_t events_unreduced = 0;        // cross-stream dependencies, one wait each, before reduction
  // With PlanOptions::regions: by node id, its region (kNoRegion for nodes that launch no kernel),
  // numbered in a topological order of the regions; each region's nodes share a stream and are
  // contiguous in launch order. Empty otherwise.
  std::vector<int> region_of;
  int region_count = 0;

  [[nodiscard]] std::size_t wait_count() const;   // events waited on, after reduction
  [[nodiscard]] std::size_t event_count() const;  // events recorded
  // Each stream's nodes, in launch order.
  [[nodiscard]] std::vector<std::vector<NodeId>> stream_nodes() const;

  bool operator==(const Plan& other) const;
};

// Allocation, launch order and events under `options`. `costs` (one per node, or empty) drive
// Alg. 2; empty costs take every node as memory-bound with equal demand.
OPARA_API Plan make_plan(const Graph& graph, const PlanOptions& options, const std::vector<NodeCost>& costs = {});

// Every problem with `plan` for `graph`, each naming the nodes involved; empty when the plan is
// correct: launch order topological, every dependency between kernel nodes ordered by its stream
// or by a wait on an event recorded earlier in launch order (which also rules out deadlock: every
// wait then refers to a node launched before it).
OPARA_API std::vector<std::string> validate(const Graph& graph, const Plan& plan);
// Throws opara::Error listing the problems, if any.
OPARA_API void require_valid(const Graph& graph, const Plan& plan);

OPARA_API std::string to_json(const Plan& plan);
// The same, with what each node is, by node id: "kinds" ("aten::linear") and "sources" (the
// model's line, "modeling_qwen2_moe.py:250", or its module scope; "" when unknown), "outputs" (the
// names of its values) and "writes" (the name of the value it writes in place; "" for none).
// plan_from_json reads both forms.
OPARA_API std::string to_json(const Graph& graph, const Plan& plan);
// Graphviz DOT: nodes filled by stream and labelled with their launch position, event waits red.
OPARA_API std::string to_dot(const Graph& graph, const Plan& plan);
// Throws opara::Error on malformed JSON or a plan of the wrong size.
OPARA_API Plan plan_from_json(std::string_view json);

OPARA_API std::string_view to_string(StreamPolicy policy);
OPARA_API std::string_view to_string(OrderPolicy policy);
OPARA_API std::string_view to_string(OpClass op_class);
// Throw opara::Error naming the accepted words.
OPARA_API StreamPolicy parse_stream_policy(std::string_view text);
OPARA_API OrderPolicy parse_order_policy(std::string_view text);

// ---- costs ----------------------------------------------------------------------

struct OPARA_API TensorShape {
  std::vector<std::int64_t> sizes;
  std::int64_t element_bytes = 0;
  [[nodiscard]] std::int64_t numel() const;
  [[nodiscard]] std::int64_t bytes() const { return numel() * element_bytes; }
};

// What one run on example inputs tells about a node's tensors.
struct NodeShapes {
  // The operator's call arguments in schema order, constants (weights) folded back in: the
  // tensors of each argument (none for a non-tensor, several for a list).
  std::vector<std::vector<TensorShape>> arguments;
  std::vector<TensorShape> outputs;
};

// FLOPs per byte above which an operator counts as compute-bound. 16 sits near the FP32 ridge of
// recent data-centre GPUs (H100/H200: about 67 TFLOP/s over 3.4-4.8 TB/s).
inline constexpr double kDefaultRidgePoint = 16.0;

// Where a model's costs come from (model_costs() in opara/model_profiler.h).
struct CostOptions {
  std::string profile;  // a recorded profile; empty: estimated from shapes
  double ridge_point = kDefaultRidgePoint;
  // A full profile must be of this model file, of the examples' shapes and dtypes and, on a CUDA
  // device, of its GPU; a mismatch throws naming what differs, or warns when this is set.
  bool allow_profile_mismatch = false;
};

// The static estimate. Bytes: every tensor read or written, weights included (views move none).
// FLOPs: 2*M*N*K for matrix products and convolutions (K from the input and weight shapes), one
// per output element otherwise. Class: the op table's (csrc/graph/op_table.cpp), and a
// compute-class op whose FLOPs per byte fall below `ridge_point` counts as memory-bound.
// Demand: the roofline cost max(bytes, FLOPs / ridge_point), in bytes.
// `shapes` empty: classes from the table alone and equal demands.
OPARA_API std::vector<NodeCost> estimate_costs(const Graph& graph, const std::vector<NodeShapes>& shapes,
                                               double ridge_point = kDefaultRidgePoint);

// 2*M*N*K for convolutions, matrix products and attention, from the shapes; nullopt for other
// operators and when the shapes do not give the formula its terms.
OPARA_API std::optional<double> dense_flops(std::string_view kind, const NodeShapes& shapes);

}  // namespace opara
