#include <fmt/format.h>

#include <string>

#include "graph/dot_text.h"
#include "graph/graph_analysis.h"

namespace opara {

std::string dot_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string to_dot(const Graph& graph) {
  std::string dot = "digraph opara {\n  node [shape=box, fontname=\"monospace\"];\n";
  for (const Node& node : graph.nodes()) {
    const bool kernel = node.has(kLaunchesKernel);
    dot += fmt::format("  n{} [label=\"{}: {}\"{}];\n", node.id, node.id, dot_escape(node.kind),
                       kernel ? "" : ", style=filled, fillcolor=lightgrey");
  }
  for (const Edge& edge : graph.edges()) {
    dot += fmt::format("  n{} -> n{}{};\n", edge.from, edge.to, edge.kind == EdgeKind::kOrder ? " [style=dashed]" : "");
  }
  dot += "}\n";
  return dot;
}

}  // namespace opara
