// NVIDIA apex's torchsched, the way its code assigns streams (NVIDIA/apex,
// apex/contrib/torchsched/inductor/scheduler.py at commit 00e4cad41890ecd0f780d164ba9fd9c2b85452a2:
// MultiCudaStreamScheduler.schedule_multi_cuda_streams; config.py's num_streams, 8), a peer
// baseline:
//  1. the critical path: a depth-first walk from each entry (a node of no producers, in program
//     order) into its users, revisiting a node only when reached deeper than before; the first path
//     the walk finds to the greatest depth (in nodes, unweighted) is the critical path;
//  2. its nodes go on stream 0; every other node, in program order, on streams 1 .. num_streams - 1
//     in turn (round-robin), whatever its dependencies; one stream in all puts everything on 0.
//
//   a → b → c      the critical path a, b, c on stream 0; d on stream 1, e on stream 2.
//   d → e ↗
//
// Where opara's graphs differ from the ones it was written for (Inductor's scheduler nodes after
// fusion): here each kernel node is one of its nodes. Over ATen's nodes an unfused graph's
// element-wise chains lengthen the critical path and multiply the side nodes; compiled with
// Inductor's regions (kernels="inductor"), the regions are closer to its fused nodes. Its
// MultiOutput nodes (getitem of an extern kernel's results) follow their producer: opara's
// counterparts launch no kernel and take no stream. Users are taken in program order where its code
// iterates a set.
#include <vector>

#include "schedule/stages.h"

namespace opara {
namespace {

constexpr int kTorchschedDefaultStreams = 8;  // config.num_streams (TORCH_SCHED_NUM_STREAMS)

// One call of its recursive visit(node, depth, prev): `parent` is the call that made it (-1 for an
// entry), so the path is the chain of parents.
struct Visit {
  NodeId node;
  int depth;
  int parent;
};

// The nodes of the first path the walk finds to the greatest depth.
std::vector<std::uint8_t> critical_path(const KernelDag& dag) {
  const std::size_t count = dag.launches_kernel.size();
  std::vector<int> node_depth(count, -1);
  std::vector<Visit> visits;
  std::vector<int> pending;  // indices into visits, the next call on top
  int deepest = -1;          // the visit that first reached the greatest depth
  for (NodeId entry = 0; entry < static_cast<NodeId>(count); ++entry) {
    if (!dag.is_kernel(entry) || !dag.predecessors[entry].empty()) continue;
    visits.push_back(Visit{entry, 1, -1});
    pending.push_back(static_cast<int>(visits.size()) - 1);
    while (!pending.empty()) {
      const int call = pending.back();
      pending.pop_back();
      const Visit visit = visits[call];
      if (node_depth[visit.node] >= visit.depth) continue;
      node_depth[visit.node] = visit.depth;
      if (deepest < 0 || visits[deepest].depth < visit.depth) deepest = call;
      const std::vector<NodeId>& users = dag.successors[visit.node];
      for (auto user = users.rbegin(); user != users.rend(); ++user) {  // the first user on top
        visits.push_back(Visit{*user, visit.depth + 1, call});
        pending.push_back(static_cast<int>(visits.size()) - 1);
      }
    }
  }
  std::vector<std::uint8_t> on_path(count, 0);
  for (int call = deepest; call >= 0; call = visits[call].parent) on_path[visits[call].node] = 1;
  return on_path;
}

}  // namespace

StreamAssignment torchsched_streams(const KernelDag& dag, const std::vector<NodeId>& order, int max_streams) {
  const int stream_count = max_streams > 0 ? max_streams : kTorchschedDefaultStreams;
  const std::size_t count = dag.launches_kernel.size();
  std::vector<int> stream_of(count, kNoStream);
  const std::vector<std::uint8_t> on_path = critical_path(dag);
  int next_side_stream = 0;
  for (NodeId id = 0; id < static_cast<NodeId>(count); ++id) {  // Inductor's order: the program's
    if (!dag.is_kernel(id)) continue;
    if (stream_count == 1 || on_path[id]) {
      stream_of[id] = 0;
    } else {
      stream_of[id] = 1 + next_side_stream;
      next_side_stream = (next_side_stream + 1) % (stream_count - 1);
    }
  }
  return numbered_by_first_launch(dag, stream_of, order);
}

}  // namespace opara
