#include "import/schema_alias_edges.h"

#include <set>

#include "graph/alias_classes.h"

namespace opara {

std::size_t add_schema_alias_edges(Graph& graph, const std::vector<NodeAliasing>& aliasing) {
  AliasClasses classes(graph.values().size());
  for (const NodeAliasing& node : aliasing) {
    for (const auto& [output, input] : node.views) classes.join(output, input);
  }
  std::size_t added = 0;
  for (NodeId writer = 0; writer < static_cast<NodeId>(aliasing.size()); ++writer) {
    if (aliasing[writer].writes.empty()) continue;
    std::set<ValueId> written;
    for (ValueId value : aliasing[writer].writes) written.insert(classes.find(value));
    for (const Node& other : graph.nodes()) {
      if (other.id == writer) continue;
      bool touches = false;
      for (const auto* values : {&other.inputs, &other.outputs}) {
        for (ValueId value : *values) touches = touches || written.count(classes.find(value)) > 0;
      }
      if (!touches) continue;
      const NodeId from = std::min(other.id, writer);
      const NodeId to = std::max(other.id, writer);
      if (!graph.has_edge(from, to)) {
        graph.add_order_edge(from, to);
        ++added;
      }
    }
  }
  return added;
}

}  // namespace opara
