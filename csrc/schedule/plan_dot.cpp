// A plan drawn with Graphviz: one colour per stream, event waits as red edges.
#include <fmt/format.h>

#include <array>

#include "graph/dot_text.h"
#include "opara/plan.h"
#include "schedule/kernel_dag.h"

namespace opara {
namespace {

// Twelve distinguishable fills (ColorBrewer "Set3"); streams past twelve reuse them.
constexpr std::array<std::string_view, 12> kStreamColours = {"#8dd3c7", "#ffffb3", "#bebada", "#fb8072",
                                                             "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
                                                             "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f"};

}  // namespace

std::string to_dot(const Graph& graph, const Plan& plan) {
  const std::vector<std::int32_t> position = positions_in(plan.launch_order, graph.size());
  std::string dot = "digraph opara_plan {\n  node [shape=box, style=filled, fontname=\"monospace\"];\n";
  for (const Node& node : graph.nodes()) {
    const int stream = plan.stream_of.at(node.id);
    if (stream == kNoStream) {
      dot += fmt::format("  n{} [label=\"{}: {}\\nhost, launch #{}\", fillcolor=white, style=dashed];\n", node.id,
                         node.id, dot_escape(node.kind), position[node.id]);
    } else {
      dot += fmt::format("  n{} [label=\"{}: {}\\nstream {}, launch #{}\", fillcolor=\"{}\"];\n", node.id, node.id,
                         dot_escape(node.kind), stream, position[node.id],
                         kStreamColours[static_cast<std::size_t>(stream) % kStreamColours.size()]);
    }
  }
  for (const Edge& edge : graph.edges()) {
    dot += fmt::format("  n{} -> n{}{};\n", edge.from, edge.to, edge.kind == EdgeKind::kOrder ? " [style=dashed]" : "");
  }
  for (std::size_t node = 0; node < plan.waits.size(); ++node) {
    for (NodeId waited : plan.waits[node]) {
      dot += fmt::format("  n{} -> n{} [color=red, penwidth=2, constraint=false, label=\"event\"];\n", waited, node);
    }
  }
  dot += "}\n";
  return dot;
}

}  // namespace opara
