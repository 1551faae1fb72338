// Segments: a Graph cut into graph segments and host steps, each a Graph of its own.
//
// Every node gets a phase; phase p holds a graph segment when p is even and a host step when it is
// odd. A graph node takes the smallest even phase no smaller than any of its predecessors' (data
// and ordering edges alike), a host node the smallest odd one; empty phases are dropped. So each
// node runs as early as its dependencies allow: device work that does not depend on a host step
// lands in the segment before it and can run while the host works, and host nodes with no graph
// work between them share a step. Example (h is a host node):
//
//   x -> a -> h -> c        phases: a 0, b 0, h 1, c 2, d 2
//   x -> b ------> d        segments: graph [a b], host [h], graph [c d]
//
// With HostOverlap::kSplit, the graph work of a phase that the next host step does not depend on
// becomes a segment of its own after the rest, launched once the step's inputs are on their way:
//
//   x -> a -> h ; x -> c -> d     segments: graph [a], graph [c d] (during h), host [h]
//
// Only phase 0 can be empty (a host node first): a node of phase p > 0 got it from a predecessor
// of phase p or p - 1, so by induction every phase below the largest but 0 is taken. Phases are
// also convex: a path from a node to another of the same phase never leaves that phase, so each
// segment's graph holds every edge its nodes need between them.
#include "overflow/segments.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "graph/graph_analysis.h"
#include "opara/error.h"
#include "support/internal_assert.h"

namespace opara {
namespace {

constexpr int kNoSegment = -1;

// "value %7 (output of node 3 (aten::relu))" or "model input x".
std::string describe_value(const Graph& graph, ValueId id) {
  const Value& value = graph.value(id);
  if (value.producer == kNoNode) return fmt::format("model input {}", value.name);
  return fmt::format("value {} (output of {})", value.name, graph.describe(value.producer));
}

// Phase of each node by the rule at the top of the file, numbered densely from 0.
std::vector<int> phases(const Graph& graph, const std::vector<bool>& host) {
  std::vector<int> phase(graph.size(), 0);
  for (const Node& node : graph.nodes()) {  // ids are a topological order
    int earliest = 0;
    for (NodeId predecessor : node.predecessors) earliest = std::max(earliest, phase[predecessor]);
    const int parity = host[node.id] ? 1 : 0;
    phase[node.id] = earliest % 2 == parity ? earliest : earliest + 1;
  }
  std::vector<int> used(phase.begin(), phase.end());
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  for (std::size_t k = 1; k < used.size(); ++k) {
    OPARA_ASSERT(used[k] == used[k - 1] + 1, "segment phase {} is empty", used[k - 1] + 1);
  }
  for (int& p : phase) p -= used.empty() ? 0 : used.front();
  return phase;
}

// Graph nodes that the host step right after their phase does not depend on, directly or not:
// scanning ids backwards, a node feeds the step when a successor is in it or feeds it.
std::vector<bool> runs_during_next_host_step(const Graph& graph, const std::vector<int>& phase,
                                             const std::vector<bool>& host) {
  std::vector<bool> feeds(graph.size(), false);
  std::vector<bool> host_phase_follows(graph.size() + 2, false);  // by phase
  for (const Node& node : graph.nodes()) host_phase_follows[phase[node.id]] = host[node.id];
  std::vector<bool> during(graph.size(), false);
  for (NodeId id = static_cast<NodeId>(graph.size()) - 1; id >= 0; --id) {
    const int p = phase[id];
    if (host[id] || !host_phase_follows[p + 1]) continue;
    for (NodeId successor : graph.node(id).successors) {
      if (phase[successor] == p + 1 || (phase[successor] == p && feeds[successor])) feeds[id] = true;
    }
    during[id] = !feeds[id];
  }
  return during;
}

// Segment of each node: one per phase, but a graph phase with both feeding and `during` nodes
// becomes two, the feeding part first.
std::vector<int> segment_indices(const std::vector<int>& phase, const std::vector<bool>& during) {
  const int phases = phase.empty() ? 0 : *std::max_element(phase.begin(), phase.end()) + 1;
  std::vector<int> parts(static_cast<std::size_t>(phases) * 2, 0);  // nodes by (phase, during)
  for (std::size_t id = 0; id < phase.size(); ++id) ++parts[phase[id] * 2 + (during[id] ? 1 : 0)];
  std::vector<int> index(parts.size(), kNoSegment);
  int next = 0;
  for (std::size_t part = 0; part < parts.size(); ++part) {
    if (parts[part] > 0) index[part] = next++;
  }
  std::vector<int> segment_of(phase.size());
  for (std::size_t id = 0; id < phase.size(); ++id) segment_of[id] = index[phase[id] * 2 + (during[id] ? 1 : 0)];
  return segment_of;
}

// The whole-graph values segment `index` reads from outside it, ascending.
std::vector<ValueId> values_read_from_outside(const Graph& graph, const std::vector<NodeId>& nodes,
                                              const std::vector<int>& segment_of, int index) {
  std::vector<ValueId> read;
  for (NodeId id : nodes) {
    for (ValueId input : graph.node(id).inputs) {
      const NodeId producer = graph.value(input).producer;
      if (producer == kNoNode || segment_of[producer] != index) read.push_back(input);
    }
  }
  std::sort(read.begin(), read.end());
  read.erase(std::unique(read.begin(), read.end()), read.end());
  return read;
}

// The whole-graph values segment `index` produces that other segments read or the model returns,
// ascending.
std::vector<ValueId> values_needed_outside(const Graph& graph, const std::vector<NodeId>& nodes,
                                           const std::vector<int>& segment_of, const std::vector<bool>& is_output,
                                           int index) {
  std::vector<ValueId> needed;
  for (NodeId id : nodes) {
    for (ValueId output : graph.node(id).outputs) {
      const auto& users = graph.value(output).users;
      const bool read_outside =
          std::any_of(users.begin(), users.end(), [&](NodeId user) { return segment_of[user] != index; });
      if (is_output[output] || read_outside) needed.push_back(output);
    }
  }
  std::sort(needed.begin(), needed.end());
  return needed;
}

// The Graph of one segment: its inputs, its nodes as copies of the whole graph's, the ordering
// edges between them (add_node adds the data edges), its outputs.
Graph segment_graph(const Graph& graph, const Segment& segment, const std::vector<Edge>& order_edges) {
  Graph part;
  part.source_path = graph.source_path;
  std::vector<ValueId> local(graph.values().size(), -1);
  for (ValueId input : segment.input_values) {
    const Value& value = graph.value(input);
    local[input] = part.add_input(value.name, value.type);
  }
  std::vector<NodeId> local_node(graph.size(), kNoNode);
  for (NodeId id : segment.nodes) {
    const Node& node = graph.node(id);
    std::vector<ValueId> inputs;
    for (ValueId input : node.inputs) inputs.push_back(local[input]);
    std::vector<std::string> types;
    for (ValueId output : node.outputs) types.push_back(graph.value(output).type);
    const NodeId copy = part.add_node(node.kind, std::move(inputs), std::move(types), node.flags, node.op);
    part.set_source(copy, node.source, node.constants);
    part.set_planned_stream(copy, node.planned_stream);
    local_node[id] = copy;
    for (std::size_t k = 0; k < node.outputs.size(); ++k) {
      local[node.outputs[k]] = part.node(copy).outputs[k];
      part.set_value_name(local[node.outputs[k]], graph.value(node.outputs[k]).name);
    }
  }
  // In the whole graph's edge order, so each node's predecessors keep their order.
  for (const Edge& edge : order_edges) part.add_order_edge(local_node[edge.from], local_node[edge.to]);
  for (ValueId output : segment.output_values) part.add_output(local[output]);
  return part;
}

}  // namespace

std::string_view to_string(SegmentKind kind) {
  return kind == SegmentKind::kGraph ? "graph" : "host";
}

std::vector<Segment> split_segments(const Graph& graph, const std::vector<bool>& host, HostOverlap overlap) {
  if (host.size() != graph.size()) {
    throw Error(fmt::format("{}: the host mask has {} entries for a graph of {} nodes", graph.source_path, host.size(),
                            graph.size()));
  }
  const std::vector<int> phase = phases(graph, host);
  std::vector<bool> during(graph.size(), false);
  if (overlap == HostOverlap::kSplit) during = runs_during_next_host_step(graph, phase, host);
  const std::vector<int> segment_of = segment_indices(phase, during);
  const int count = segment_of.empty() ? 0 : *std::max_element(segment_of.begin(), segment_of.end()) + 1;
  std::vector<Segment> segments(static_cast<std::size_t>(count));
  for (const Node& node : graph.nodes()) {
    segments[segment_of[node.id]].nodes.push_back(node.id);
    segments[segment_of[node.id]].during_next_host_step = during[node.id];
  }
  std::vector<std::vector<Edge>> order_edges(segments.size());
  for (const Edge& edge : graph.edges()) {
    if (edge.kind == EdgeKind::kOrder && segment_of[edge.from] == segment_of[edge.to]) {
      order_edges[segment_of[edge.from]].push_back(edge);
    }
  }
  const std::vector<bool> is_output = model_output_mask(graph);
  for (int index = 0; index < count; ++index) {
    Segment& segment = segments[index];
    segment.kind = host[segment.nodes.front()] ? SegmentKind::kHost : SegmentKind::kGraph;
    segment.input_values = values_read_from_outside(graph, segment.nodes, segment_of, index);
    segment.output_values = values_needed_outside(graph, segment.nodes, segment_of, is_output, index);
    segment.graph = segment_graph(graph, segment, order_edges[index]);
  }
  return segments;
}

std::vector<bool> uncapturable_nodes(const Graph& graph) {
  std::vector<bool> mask(graph.size(), false);
  for (const Node& node : graph.nodes()) mask[node.id] = node.has(kNotCapturable);
  return mask;
}

// ---- validation -------------------------------------------------------------------------------

namespace {

using Problems = std::vector<std::string>;

// Segment of each node (kNoSegment for none); reports empty segments, kinds that do not
// alternate, nodes out of range, out of order, in two segments or in none.
std::vector<int> check_cover(const Graph& graph, const std::vector<Segment>& segments, Problems& problems) {
  std::vector<int> segment_of(graph.size(), kNoSegment);
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const Segment& segment = segments[s];
    if (segment.nodes.empty()) problems.push_back(fmt::format("segment {} is empty", s));
    const bool overlapped = segment.kind == SegmentKind::kGraph && segment.during_next_host_step;
    if (overlapped && (s + 1 == segments.size() || segments[s + 1].kind != SegmentKind::kHost)) {
      problems.push_back(fmt::format("segment {} runs during the next host step, and no host step follows it", s));
    }
    if (s > 0 && segment.kind == segments[s - 1].kind && !overlapped) {
      problems.push_back(fmt::format("segments {} and {} are both {} segments: kinds must alternate", s - 1, s,
                                     to_string(segment.kind)));
    }
    for (std::size_t k = 0; k < segment.nodes.size(); ++k) {
      const NodeId id = segment.nodes[k];
      if (id < 0 || id >= static_cast<NodeId>(graph.size())) {
        problems.push_back(fmt::format("segment {} lists node {}, which the graph does not have", s, id));
        continue;
      }
      if (k > 0 && id <= segment.nodes[k - 1]) {
        problems.push_back(fmt::format("segment {} lists {} after node {}: nodes must be ascending", s,
                                       graph.describe(id), segment.nodes[k - 1]));
      }
      if (segment_of[id] != kNoSegment && segment_of[id] != static_cast<int>(s)) {
        problems.push_back(fmt::format("{} is in segments {} and {}", graph.describe(id), segment_of[id], s));
      } else {
        segment_of[id] = static_cast<int>(s);
      }
    }
  }
  for (const Node& node : graph.nodes()) {
    if (segment_of[node.id] == kNoSegment)
      problems.push_back(fmt::format("{} is in no segment", graph.describe(node.id)));
  }
  return segment_of;
}

// No edge goes back, and none goes from a segment that runs during a host step into that step.
void check_edges(const Graph& graph, const std::vector<Segment>& segments, const std::vector<int>& segment_of,
                 Problems& problems) {
  for (const Edge& edge : graph.edges()) {
    const int from = segment_of[edge.from];
    const int to = segment_of[edge.to];
    if (from == kNoSegment || to == kNoSegment) continue;
    const char* kind = edge.kind == EdgeKind::kData ? "data" : "ordering";
    if (from > to) {
      problems.push_back(fmt::format("the {} edge {} -> {} goes back from segment {} to segment {}", kind,
                                     graph.describe(edge.from), graph.describe(edge.to), from, to));
    }
    if (to == from + 1 && segments[from].during_next_host_step && segments[to].kind == SegmentKind::kHost) {
      problems.push_back(fmt::format("segment {} runs during host step {}, which depends on it: the {} edge {} -> {}",
                                     from, to, kind, graph.describe(edge.from), graph.describe(edge.to)));
    }
  }
}

// Reports the difference between the values a segment lists and those it should.
void compare_values(const Graph& graph, std::size_t s, const char* what, const std::vector<ValueId>& listed,
                    const std::vector<ValueId>& expected, Problems& problems) {
  if (!std::is_sorted(listed.begin(), listed.end())) {
    problems.push_back(fmt::format("segment {}'s {} values are not ascending", s, what));
  }
  const std::set<ValueId> have(listed.begin(), listed.end());
  const std::set<ValueId> want(expected.begin(), expected.end());
  if (have.size() != listed.size()) problems.push_back(fmt::format("segment {} lists an {} value twice", s, what));
  for (ValueId value : want) {
    if (have.count(value) == 0) {
      problems.push_back(fmt::format("segment {} lacks the {} {}", s, what, describe_value(graph, value)));
    }
  }
  for (ValueId value : have) {
    if (want.count(value) != 0) continue;
    if (value < 0 || value >= static_cast<ValueId>(graph.values().size())) {
      problems.push_back(fmt::format("segment {} lists {} value {}, which the graph does not have", s, what, value));
    } else {
      problems.push_back(
          fmt::format("segment {} lists the {} {} it should not", s, what, describe_value(graph, value)));
    }
  }
}

// Inputs and outputs of every segment, and where each input comes from; every model output made.
void check_values(const Graph& graph, const std::vector<Segment>& segments, const std::vector<int>& segment_of,
                  Problems& problems) {
  const std::vector<bool> is_output = model_output_mask(graph);
  std::vector<std::vector<std::size_t>> output_by(graph.values().size());  // segments listing it as output
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const Segment& segment = segments[s];
    std::vector<NodeId> nodes;
    std::copy_if(segment.nodes.begin(), segment.nodes.end(), std::back_inserter(nodes),
                 [&](NodeId id) { return id >= 0 && id < static_cast<NodeId>(graph.size()); });
    const int index = static_cast<int>(s);
    compare_values(graph, s, "input", segment.input_values, values_read_from_outside(graph, nodes, segment_of, index),
                   problems);
    compare_values(graph, s, "output", segment.output_values,
                   values_needed_outside(graph, nodes, segment_of, is_output, index), problems);
    for (ValueId input : segment.input_values) {
      if (input < 0 || input >= static_cast<ValueId>(graph.values().size())) continue;
      if (graph.value(input).producer == kNoNode) continue;
      const auto& from = output_by[input];
      if (from.empty()) {
        problems.push_back(
            fmt::format("segment {} reads {}, which no earlier segment outputs", s, describe_value(graph, input)));
      } else if (from.size() > 1) {
        problems.push_back(fmt::format("segment {} reads {}, which segments {} and {} both output", s,
                                       describe_value(graph, input), from[0], from[1]));
      }
    }
    for (ValueId output : segment.output_values) {
      if (output >= 0 && output < static_cast<ValueId>(graph.values().size())) output_by[output].push_back(s);
    }
  }
  for (ValueId output : graph.outputs()) {
    if (graph.value(output).producer != kNoNode && output_by[output].empty()) {
      problems.push_back(fmt::format("model output {} is output by no segment", describe_value(graph, output)));
    }
  }
}

using EdgeKey = std::tuple<NodeId, NodeId, EdgeKind>;

// The segment's own graph: node i is nodes[i] (kind, flags, values read and made), its inputs and
// outputs are input_values and output_values, and its edges are the whole graph's between its nodes.
void check_segment_graph(const Graph& graph, std::size_t s, const Segment& segment, const std::vector<int>& segment_of,
                         Problems& problems) {
  const Graph& part = segment.graph;
  const auto in_graph = [&](NodeId id) { return id >= 0 && id < static_cast<NodeId>(graph.size()); };
  if (!std::all_of(segment.nodes.begin(), segment.nodes.end(), in_graph)) return;  // check_cover said so
  if (part.size() != segment.nodes.size() || part.inputs().size() != segment.input_values.size() ||
      part.outputs().size() != segment.output_values.size()) {
    problems.push_back(
        fmt::format("segment {}'s graph has {} nodes, {} inputs and {} outputs where the segment lists {}, {} and {}",
                    s, part.size(), part.inputs().size(), part.outputs().size(), segment.nodes.size(),
                    segment.input_values.size(), segment.output_values.size()));
    return;
  }
  std::vector<ValueId> whole(part.values().size(), -1);  // by value of `part`
  for (std::size_t i = 0; i < part.inputs().size(); ++i) whole[part.inputs()[i]] = segment.input_values[i];
  for (std::size_t i = 0; i < part.size(); ++i) {
    const NodeId id = segment.nodes[i];
    const Node& node = graph.node(id);
    const Node& copy = part.node(static_cast<NodeId>(i));
    std::vector<ValueId> reads;
    for (ValueId input : copy.inputs) reads.push_back(whole[input]);
    if (copy.kind != node.kind || copy.flags != node.flags || reads != node.inputs ||
        copy.outputs.size() != node.outputs.size()) {
      problems.push_back(
          fmt::format("segment {}'s node {} ({}) is not a copy of {}", s, i, copy.kind, graph.describe(id)));
      continue;
    }
    for (std::size_t k = 0; k < copy.outputs.size(); ++k) whole[copy.outputs[k]] = node.outputs[k];
  }
  for (std::size_t i = 0; i < part.outputs().size(); ++i) {
    if (whole[part.outputs()[i]] != segment.output_values[i]) {
      problems.push_back(
          fmt::format("segment {}'s graph output {} is not its output value {}", s, i, segment.output_values[i]));
    }
  }
  std::set<EdgeKey> have;
  for (const Edge& edge : part.edges()) have.emplace(segment.nodes[edge.from], segment.nodes[edge.to], edge.kind);
  std::set<EdgeKey> want;
  for (const Edge& edge : graph.edges()) {
    if (segment_of[edge.from] == static_cast<int>(s) && segment_of[edge.to] == static_cast<int>(s)) {
      want.emplace(edge.from, edge.to, edge.kind);
    }
  }
  for (const auto& [from, to, kind] : want) {
    if (have.count({from, to, kind}) == 0) {
      problems.push_back(
          fmt::format("segment {}'s graph lacks the edge {} -> {}", s, graph.describe(from), graph.describe(to)));
    }
  }
  for (const auto& [from, to, kind] : have) {
    if (want.count({from, to, kind}) == 0) {
      problems.push_back(fmt::format("segment {}'s graph has an edge {} -> {} the graph does not", s,
                                     graph.describe(from), graph.describe(to)));
    }
  }
}

}  // namespace

std::vector<std::string> validate_segments(const Graph& graph, const std::vector<Segment>& segments) {
  Problems problems;
  const std::vector<int> segment_of = check_cover(graph, segments, problems);
  check_edges(graph, segments, segment_of, problems);
  check_values(graph, segments, segment_of, problems);
  for (std::size_t s = 0; s < segments.size(); ++s) {
    check_segment_graph(graph, s, segments[s], segment_of, problems);
  }
  return problems;
}

}  // namespace opara
