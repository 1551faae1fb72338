// TensorRT-LLM's automatic multi-stream pass, the way its code does it (NVIDIA/TensorRT-LLM,
// tensorrt_llm/_torch/compilation/multi_stream/auto_multi_stream.py at commit
// 0496601f1191d8b99f676bd297b0d6aa56171f2a: estimate_time, MultiStreamDAG.compute_distance and
// assign_streams), a peer baseline:
//  1. weights: TensorRT-LLM's MoE ops 20, GEMMs 10 (of ATen's, aten.mm alone: addmm, linear and
//     convolutions weigh 1), views, permutes, aliases, empty tensors and getitem 0, size queries 0,
//     everything else 1;
//  2. distances: each node's longest weighted path to the output node, its own weight excluded;
//  3. a list schedule: the ready node of largest distance first (program order among equals); a
//     node of weight 0 goes on its producer's stream, any other on the first stream idle when the
//     node can start, else the stream that frees soonest, among `max_num_streams` streams (its
//     configuration's default is 1, off; its accuracy tests run 3).
//
//   a ─(mm 10)→ c ─┐
//   b ─(add 1)─────┴→ out     c is a GEMM: a and c take stream 0, b starts at 0 on idle stream 1.
//
// Where opara's graphs differ from the ones it was written for (Dynamo's post-grad FX graphs):
// opara's nodes are those of torch.export or TorchScript, so a linear layer is one aten::linear
// (weight 1) where TensorRT-LLM sees a permute and an addmm; dependencies are opara's (data edges
// and the ordering edges of in-place writes: TensorRT-LLM tracks only its own in-place ops, the
// rest being functional after AOT autograd); and nodes that launch no kernel keep no stream in the
// plan, though they weigh in the simulation as they do there. Its distances propagate from the
// output node only through nodes all of whose users lead there: a node with a user that reaches no
// output (an in-place write to a cache) keeps the partial distance its other users gave it, as in
// its code.
#include <cstdint>
#include <queue>
#include <string_view>

#include "schedule/stages.h"

namespace opara {
namespace {

constexpr std::int64_t kGemmCost = 10;  // TensorRT-LLM's GEMM_OP_COST; its MOE_OP_COST (20) weighs its own ops only
constexpr std::int64_t kDefaultCost = 1;
constexpr int kTrtllmAccuracyTestStreams = 3;

// A node whose results are host integers (a SymInt of a size query): "happens on host", weight 0.
bool is_symint_node(const Graph& graph, const Node& node) {
  if (node.outputs.empty()) return false;
  for (ValueId output : node.outputs) {
    const std::string& type = graph.value(output).type;
    if (type != "int" && type != "SymInt") return false;
  }
  return true;
}

// estimate_time: its no_cost_ops (getitem, aten.view.default and .dtype, aten.alias,
// aten.empty.memory_format, aten.permute) and aten.mm among its gemm_ops.
std::int64_t trtllm_weight(const Graph& graph, const Node& node) {
  static constexpr std::string_view kNoCost[] = {"aten::view",        "aten::alias",       "aten::empty",
                                                 "aten::permute",     "prim::TupleUnpack", "prim::ListUnpack",
                                                 "aten::__getitem__", "prim::TupleIndex"};
  if (is_symint_node(graph, node)) return 0;
  for (std::string_view kind : kNoCost) {
    if (node.kind == kind) return 0;
  }
  return node.kind == "aten::mm" ? kGemmCost : kDefaultCost;
}

// compute_distance: from the output node (weight 1, as any node that is not a call), a node passes
// distances to its producers once every user of it has: the reverse topological work list.
std::vector<std::int64_t> distances_to_exit(const Graph& graph, const std::vector<std::int64_t>& weight) {
  const std::size_t count = graph.size();
  std::vector<std::uint8_t> feeds_output(count, 0);
  std::vector<std::int64_t> distance(count, 0);
  for (ValueId output : graph.outputs()) {
    const NodeId producer = graph.value(output).producer;
    if (producer == kNoNode) continue;
    feeds_output[producer] = 1;
    distance[producer] = kDefaultCost;  // the output node's weight; its distance is 0
  }
  std::vector<std::uint8_t> passed_on(count, 0);  // reached by compute_distance's work list
  for (NodeId id = static_cast<NodeId>(count) - 1; id >= 0; --id) {
    const Node& node = graph.node(id);
    bool reached = feeds_output[id] != 0 || !node.successors.empty();
    for (NodeId user : node.successors) reached = reached && passed_on[user] != 0;
    if (!reached) continue;
    passed_on[id] = 1;
    for (NodeId producer : node.predecessors)
      distance[producer] = std::max(distance[producer], weight[id] + distance[id]);
  }
  return distance;
}

struct Ready {
  std::int64_t distance;
  NodeId node;
  // calc_priority: the largest distance first, then program order.
  bool operator<(const Ready& other) const {
    return distance != other.distance ? distance < other.distance : node > other.node;
  }
};

struct ListSchedule {
  std::vector<NodeId> order;  // every node, as the schedule took them
  std::vector<int> stream_of;
};

ListSchedule list_schedule(const Graph& graph, int stream_count) {
  const std::size_t count = graph.size();
  std::vector<std::int64_t> weight(count);
  for (const Node& node : graph.nodes()) weight[node.id] = trtllm_weight(graph, node);
  const std::vector<std::int64_t> distance = distances_to_exit(graph, weight);

  ListSchedule result;
  result.order.reserve(count);
  result.stream_of.assign(count, 0);
  std::vector<std::int64_t> end_time(count, 0);
  std::vector<std::int64_t> stream_time(static_cast<std::size_t>(stream_count), 0);
  std::vector<std::size_t> waiting(count);
  std::priority_queue<Ready> ready;
  for (const Node& node : graph.nodes()) {
    waiting[node.id] = node.predecessors.size();
    if (waiting[node.id] == 0) ready.push(Ready{distance[node.id], node.id});
  }
  // pick_stream
  auto pick = [&](const Node& node, std::int64_t start) {
    if (weight[node.id] == 0) {
      // Its producer's stream: the first of its inputs as flatten_args pops them, last argument first.
      for (auto producer = node.predecessors.rbegin(); producer != node.predecessors.rend(); ++producer) {
        if (!is_symint_node(graph, graph.node(*producer))) return result.stream_of[*producer];
      }
      return 0;  // the entry node's stream
    }
    int soonest = 0;
    for (int stream = 0; stream < stream_count; ++stream) {
      if (stream_time[stream] <= start) return stream;
      if (stream_time[stream] < stream_time[soonest]) soonest = stream;
    }
    return soonest;
  };
  while (!ready.empty()) {
    const Node& node = graph.node(ready.top().node);
    ready.pop();
    std::int64_t start = 0;
    for (NodeId producer : node.predecessors) start = std::max(start, end_time[producer]);
    const int stream = pick(node, start);
    result.stream_of[node.id] = stream;
    end_time[node.id] = std::max(start, stream_time[stream]) + weight[node.id];
    stream_time[stream] = end_time[node.id];
    result.order.push_back(node.id);
    for (NodeId user : node.successors) {
      if (--waiting[user] == 0) ready.push(Ready{distance[user], user});
    }
  }
  return result;
}

}  // namespace

std::vector<NodeId> trtllm_order(const Graph& graph) {
  return list_schedule(graph, 1).order;
}

StreamAssignment trtllm_streams(const Graph& graph, const KernelDag& dag, const std::vector<NodeId>& order,
                                int max_streams) {
  const ListSchedule schedule = list_schedule(graph, max_streams > 0 ? max_streams : kTrtllmAccuracyTestStreams);
  return numbered_by_first_launch(dag, schedule.stream_of, order);
}

}  // namespace opara
