#pragma once

// Cutting a Graph into segments: graph segments (captured as CUDA graphs, or run by any planner
// and executor as they are) with host steps between them for the nodes that cannot live inside a
// CUDA graph (kNotCapturable) or that a placement sends to the CPU. See segments.cpp for the rule.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "opara/graph.h"

namespace opara {

enum class SegmentKind : std::uint8_t {
  kGraph,  // device work: one CUDA graph (or one plan on the CPU)
  kHost,   // a host step between two graph segments
};

struct Segment {
  SegmentKind kind = SegmentKind::kGraph;
  // Ids in the whole graph, ascending (a topological order).
  std::vector<NodeId> nodes;
  // The segment alone: node i of it is nodes[i] of the whole graph (same kind, flags, op, source,
  // constants, output value names); the data and ordering edges between its own nodes are kept.
  // Its inputs are input_values, its outputs output_values, in order; source_path is the whole
  // graph's. Messages from an executor of this graph name its own node ids, not the whole graph's.
  Graph graph;
  // Whole-graph value of each input of `graph`, ascending: values its nodes read that earlier
  // segments produce, and model inputs.
  std::vector<ValueId> input_values;
  // Whole-graph value of each output of `graph`, ascending: values its nodes produce that later
  // segments read, and model outputs.
  std::vector<ValueId> output_values;
  // A graph segment that neither feeds the host step after it nor depends on it (HostOverlap::kSplit):
  // the runner may launch it once that step's inputs are on their way, so it runs while the host works.
  bool during_next_host_step = false;
};

// What split_segments does with the graph work before a host step that the step does not read.
enum class HostOverlap : std::uint8_t {
  kNone,   // one graph segment before each host step: the step waits for all of it
  kSplit,  // two: what the step reads, directly or not, then the rest (during_next_host_step)
};

// Cuts `graph` into segments. host[node] true: the node runs in a host step. Every other node
// goes to a graph segment, each node as early as its dependencies (data and ordering edges) allow,
// so device work that does not depend on a host step lands in the segment before it and can run
// while the host works. Segments alternate graph, host, graph, ... (the first may be a host step);
// none is empty; host nodes that do not depend on graph work between them share one host step. A
// graph without nodes gives no segments. With HostOverlap::kSplit, the graph segment before each
// host step is cut in two when both parts have nodes: first the nodes the step depends on, then the
// others, marked during_next_host_step (either part alone stays one segment, marked when it is the
// second). Throws opara::Error if host.size() != graph.size().
std::vector<Segment> split_segments(const Graph& graph, const std::vector<bool>& host,
                                    HostOverlap overlap = HostOverlap::kNone);

// "graph" or "host".
std::string_view to_string(SegmentKind kind);

// The nodes flagged kNotCapturable (aten::item, nonzero, ...), as a mask for split_segments.
std::vector<bool> uncapturable_nodes(const Graph& graph);

// Every problem with `segments` for `graph`, each naming the nodes (graph.describe) or values
// involved; empty when they are correct: no segment empty and kinds alternating, but for a graph
// segment marked during_next_host_step, which may follow a graph segment, must be followed by a
// host step and must have no edge into it; every node in
// exactly one segment, ascending; every edge going to the same or a later segment; each segment's
// inputs exactly what its nodes read from outside it, each a model input or an output of exactly
// one earlier segment; its outputs exactly what it produces that later segments read or the model
// returns; every model output produced by a segment or a model input; each segment's graph the
// whole graph's nodes (kind, flags, values read) and edges restricted to the segment.
std::vector<std::string> validate_segments(const Graph& graph, const std::vector<Segment>& segments);

}  // namespace opara
