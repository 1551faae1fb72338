#include <fmt/format.h>

#include <string>

#include "opara/graph_analysis.h"

namespace opara {
namespace {

// DOT string literals escape quotes and backslashes.
std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string to_dot(const Graph& graph) {
  std::string dot = "digraph opara {\n  node [shape=box, fontname=\"monospace\"];\n";
  for (const Node& node : graph.nodes()) {
    const bool kernel = node.has(kLaunchesKernel);
    dot += fmt::format("  n{} [label=\"{}: {}\"{}];\n", node.id, node.id, escape(node.kind),
                       kernel ? "" : ", style=filled, fillcolor=lightgrey");
  }
  for (const Edge& edge : graph.edges()) {
    dot += fmt::format("  n{} -> n{}{};\n", edge.from, edge.to, edge.kind == EdgeKind::kOrder ? " [style=dashed]" : "");
  }
  dot += "}\n";
  return dot;
}

}  // namespace opara
