#pragma once

// torch.export keeps `@torch.no_grad()` and `torch.autocast(enabled=False)` regions as
// higher-order ops (wrap_with_set_grad_enabled, wrap_with_autocast) around a subgraph. For
// inference they are plain code: their bodies are spliced into the graph.

#include <string>
#include <unordered_map>
#include <vector>

#include "import/exported_names.h"

namespace opara {

struct InlinedNodes {
  std::vector<ep::Node> nodes;  // in program order, no wrapper left
  // Names a wrapper returned unchanged from its inputs: the value each stands for.
  std::unordered_map<std::string, std::string> aliases;
};

// `graph`'s nodes with every wrapper's body inlined (nested ones too); the bodies' own value
// names are prefixed so that they never meet the graph's. A region under autocast that is
// enabled changes dtypes at run time: refused, naming `path`, with what to do.
InlinedNodes inline_wrappers(const ep::Graph& graph, const std::string& path);

}  // namespace opara
