#include "overflow/cpu_steps.h"

#include <algorithm>
#include <set>

#include "graph/written_aliases.h"
#include "overflow/placements.h"

namespace opara {
namespace {

constexpr int kDeviceSide = -1;

}  // namespace

bool step_runs_on_cpu(const Graph& graph, const Segment& segment, const std::vector<Placement>& placement) {
  return segment.kind == SegmentKind::kHost && std::any_of(segment.nodes.begin(), segment.nodes.end(), [&](NodeId id) {
           return placement[id] == Placement::kCpu && graph.node(id).has(kLaunchesKernel);
         });
}

namespace {

// Whether the copies break written group `root`: see cpu_nodes_safe_for_aliases.
bool copies_break(const Graph& graph, const WrittenAliases& aliases, ValueId root, const std::vector<int>& segment_of,
                  const std::vector<int>& side) {
  const auto in_group = [&](ValueId value) { return aliases.group[value] == root; };
  std::set<int> writers;
  for (const Node& node : graph.nodes()) {
    if (node.has(kWritesInput) && !node.inputs.empty() && in_group(node.inputs.front())) writers.insert(side[node.id]);
  }
  if (writers.size() > 1) return true;
  const int step = *writers.begin();
  const auto made_in_step = [&](ValueId value) {
    const NodeId producer = graph.value(value).producer;
    return producer != kNoNode && side[producer] == step;
  };
  if (step == kDeviceSide) {  // written on the device: a CPU copy of any of it would miss the writes
    for (const Node& node : graph.nodes()) {
      if (side[node.id] != kDeviceSide && std::any_of(node.outputs.begin(), node.outputs.end(), in_group)) return true;
    }
    return false;
  }
  // Written in one CPU step: it may stage one value of the group (one buffer holds the writes),
  // and later only the values it made (copied back after its writes) may be read.
  std::set<ValueId> staged;
  for (const Node& node : graph.nodes()) {
    if (side[node.id] != step) continue;
    for (ValueId input : node.inputs) {
      if (in_group(input) && !made_in_step(input)) staged.insert(input);
    }
  }
  if (staged.size() > 1) return true;
  for (const Node& node : graph.nodes()) {
    if (segment_of[node.id] <= step) continue;
    for (ValueId input : node.inputs) {
      if (in_group(input) && !made_in_step(input)) return true;
    }
  }
  for (ValueId output : graph.outputs()) {
    if (in_group(output) && !made_in_step(output)) return true;
  }
  return false;
}

}  // namespace

std::vector<bool> cpu_nodes_safe_for_aliases(const Graph& graph, std::vector<bool> cpu, const std::vector<bool>& host) {
  const WrittenAliases aliases = written_aliases(graph);
  for (;;) {
    const std::vector<Placement> placement = placement_with_cpu_nodes(graph, cpu, host);
    const std::vector<Segment> segments = split_segments(graph, host_mask(placement));
    std::vector<int> segment_of(graph.size());
    std::vector<int> side(graph.size(), kDeviceSide);  // by node: the CPU step it runs in
    for (std::size_t s = 0; s < segments.size(); ++s) {
      const bool on_cpu = step_runs_on_cpu(graph, segments[s], placement);
      for (NodeId id : segments[s].nodes) {
        segment_of[id] = static_cast<int>(s);
        if (on_cpu) side[id] = static_cast<int>(s);
      }
    }
    std::vector<bool> back_to_gpu(graph.size(), false);
    bool broken = false;
    for (ValueId root = 0; root < static_cast<ValueId>(graph.values().size()); ++root) {
      if (!aliases.written[root] || !copies_break(graph, aliases, root, segment_of, side)) continue;
      broken = true;
      bool moved = false;
      std::set<int> steps;
      const auto in_group = [&](ValueId value) { return aliases.group[value] == root; };
      for (const Node& node : graph.nodes()) {
        const bool makes = std::any_of(node.outputs.begin(), node.outputs.end(), in_group);
        if (!makes && std::none_of(node.inputs.begin(), node.inputs.end(), in_group)) continue;
        if (side[node.id] != kDeviceSide) steps.insert(side[node.id]);
        // Writers and makers go back; a CPU node that only reads the group may stay, since with
        // every writer on the device its copy is taken after the writes it must see.
        if (cpu[node.id] && node.has(kLaunchesKernel) && makes) back_to_gpu[node.id] = moved = true;
      }
      if (!moved) {  // only host nodes and views of the group are on the CPU: their steps go back whole
        for (int step : steps) {
          for (NodeId id : segments[step].nodes) back_to_gpu[id] = cpu[id];
        }
      }
    }
    if (!broken) return cpu;
    for (NodeId id = 0; id < static_cast<NodeId>(graph.size()); ++id) {
      if (back_to_gpu[id]) cpu[id] = false;
    }
  }
}

std::vector<Placement> runnable_placement(const Graph& graph, const std::vector<Placement>& chosen,
                                          const std::vector<bool>& host) {
  std::vector<bool> cpu(graph.size(), false);
  for (const Node& node : graph.nodes()) {
    cpu[node.id] = chosen[node.id] == Placement::kCpu && node.has(kLaunchesKernel);
  }
  return placement_with_cpu_nodes(graph, cpu_nodes_safe_for_aliases(graph, std::move(cpu), host), host);
}

}  // namespace opara
