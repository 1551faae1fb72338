#include "graph/written_aliases.h"

#include "graph/alias_classes.h"
#include "graph/graph_analysis.h"

namespace opara {

WrittenAliases written_aliases(const Graph& graph) {
  AliasClasses groups(graph.values().size());
  for (const Node& node : graph.nodes()) {
    if (node.inputs.empty()) continue;
    if (node.has(kWritesInput)) {
      for (ValueId output : node.outputs) groups.join(output, node.inputs.front());  // ATen writes `self`
    } else if (node.has(kView) || !node.has(kLaunchesKernel)) {
      for (ValueId output : node.outputs) {
        for (ValueId input : node.inputs) groups.join(output, input);
      }
    }
  }
  WrittenAliases aliases;
  aliases.written.assign(graph.values().size(), false);
  for (const Node& node : graph.nodes()) {
    if (node.has(kWritesInput) && !node.inputs.empty()) aliases.written[groups.find(node.inputs.front())] = true;
  }
  for (ValueId value = 0; value < static_cast<ValueId>(graph.values().size()); ++value) {
    aliases.group.push_back(groups.find(value));
  }
  return aliases;
}

std::vector<bool> inputs_written_in_place(const Graph& graph) {
  const WrittenAliases aliases = written_aliases(graph);
  std::vector<bool> written;
  written.reserve(graph.inputs().size());
  for (ValueId input : graph.inputs()) written.push_back(aliases.written[aliases.group[input]]);
  return written;
}

}  // namespace opara
