#include "schedule/pool_estimate.h"

#include <algorithm>
#include <set>
#include <string_view>

#include "graph/alias_classes.h"
#include "graph/op_table.h"
#include "schedule/caching_allocator_model.h"
#include "schedule/capture_actions.h"

namespace opara {
namespace {

// A value of this type may hold a tensor's storage ("Tensor", "Tensor[]", "Tensor?", a tuple; an
// unknown type may too); a size or a flag does not keep its tensor alive.
bool may_hold_tensor(std::string_view type) {
  return type.empty() || type.find("Tensor") != std::string_view::npos || type.front() == '(' ||
         type.find("Any") != std::string_view::npos;
}

// Values that may share a storage: a view's, a list's or an in-place write's results with what
// they came from.
AliasClasses storage_classes(const Graph& graph) {
  AliasClasses classes(graph.values().size());
  for (const Node& node : graph.nodes()) {
    if (node.inputs.empty()) continue;
    if (node.has(kWritesInput)) {
      for (ValueId output : node.outputs) classes.join(output, node.inputs.front());
    } else if (node.has(kView) || !node.has(kLaunchesKernel)) {
      for (ValueId output : node.outputs) {
        if (!may_hold_tensor(graph.value(output).type)) continue;
        for (ValueId input : node.inputs) {
          if (may_hold_tensor(graph.value(input).type)) classes.join(output, input);
        }
      }
    }
  }
  return classes;
}

bool allocates_results(const Node& node) {
  return node.has(kLaunchesKernel) && !node.has(kView) && !node.has(kWritesInput);
}

struct Run {
  NodeId node;
  int stream;
};

// The nodes in the order capture runs them, each with the stream it runs on.
std::vector<Run> runs_of(const Graph& graph, const Plan& plan) {
  std::vector<Run> runs;
  for (const CaptureAction& action : capture_actions(graph, plan)) {
    if (action.step == CaptureStep::kRun) runs.push_back({action.node, action.stream});
  }
  return runs;
}

}  // namespace

PoolEstimate estimate_pool(const Graph& graph, const Plan& plan, const std::vector<NodeShapes>& shapes,
                           CaptureHold hold) {
  if (shapes.size() != graph.size()) return {};
  AliasClasses classes = storage_classes(graph);
  const std::vector<Run> runs = runs_of(graph, plan);
  const std::size_t values = graph.values().size();
  // By storage class: the last run that touches it, whether it outlives the capture, and the
  // streams that read it (a read on another stream than the allocation's holds the block under
  // record-stream).
  std::vector<std::size_t> last_use(values, 0);
  std::vector<bool> kept(values, false);
  std::vector<std::vector<int>> read_on(values);
  for (std::size_t position = 0; position < runs.size(); ++position) {
    const Node& node = graph.node(runs[position].node);
    for (const auto* touched : {&node.inputs, &node.outputs}) {
      for (ValueId value : *touched) last_use[classes.find(value)] = position;
    }
    for (ValueId value : node.inputs) {
      std::vector<int>& streams = read_on[classes.find(value)];
      if (std::find(streams.begin(), streams.end(), runs[position].stream) == streams.end()) {
        streams.push_back(runs[position].stream);
      }
    }
  }
  for (ValueId output : graph.outputs()) kept[classes.find(output)] = true;
  for (ValueId input : graph.inputs()) kept[classes.find(input)] = true;

  CachingAllocatorModel allocator;
  PoolEstimate estimate;
  // By run: the blocks freed after it.
  std::vector<std::vector<CachingAllocatorModel::BlockRef>> ending(runs.size());
  for (std::size_t position = 0; position < runs.size(); ++position) {
    const Node& node = graph.node(runs[position].node);
    if (allocates_results(node) && !node.outputs.empty()) {
      const std::vector<TensorShape>& results = shapes[node.id].outputs;
      for (std::size_t k = 0; k < results.size(); ++k) {
        const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(results[k].bytes(), 0));
        if (bytes == 0) continue;
        // Results line up with the node's values, or a list result holds them all.
        const ValueId value = node.outputs[std::min(k, node.outputs.size() - 1)];
        const ValueId storage = classes.find(value);
        const int stream = runs[position].stream;
        const CachingAllocatorModel::BlockRef block = allocator.allocate(stream, bytes);
        const std::vector<int>& readers = read_on[storage];
        const bool elsewhere = std::any_of(readers.begin(), readers.end(), [&](int other) { return other != stream; });
        const bool held = kept[storage] || hold == CaptureHold::kKeepAlive || elsewhere;
        if (held) {
          estimate.held_bytes += CachingAllocatorModel::rounded(bytes);
        } else {
          ending[last_use[storage]].push_back(block);
        }
      }
    }
    for (const CachingAllocatorModel::BlockRef& block : ending[position]) allocator.free(block);
  }
  estimate.pool_bytes = allocator.reserved_bytes();
  estimate.peak_live_bytes = allocator.peak_allocated_bytes();
  return estimate;
}

std::size_t estimate_blas_workspaces(const Graph& graph, const Plan& plan, std::size_t bytes_per_stream) {
  std::set<int> streams;
  for (const Node& node : graph.nodes()) {
    if (node.has(kLaunchesKernel) && op_traits(node.kind).uses_blas) streams.insert(plan.stream_of[node.id]);
  }
  return streams.size() * bytes_per_stream;
}

int stream_cap_within(const Graph& graph, PlanOptions options, const std::vector<NodeCost>& costs,
                      const std::vector<NodeShapes>& shapes, std::size_t budget_bytes, CaptureHold hold,
                      std::size_t blas_workspace_bytes) {
  const auto fits = [&](const Plan& plan) {
    return estimate_pool(graph, plan, shapes, hold).pool_bytes +
               estimate_blas_workspaces(graph, plan, blas_workspace_bytes) <=
           budget_bytes;
  };
  options.max_streams = 0;
  const Plan uncapped = make_plan(graph, options, costs);
  if (fits(uncapped)) return 0;
  // Down one stream at a time, in steps of an eighth past 16 (a plan of thousands of streams).
  int cap = uncapped.stream_count - 1;
  while (cap >= 2) {
    options.max_streams = cap;
    if (fits(make_plan(graph, options, costs))) return cap;
    cap = cap > 16 ? cap - std::max(1, cap / 8) : cap - 1;
  }
  return 1;
}

}  // namespace opara
