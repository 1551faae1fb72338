#pragma once

// One FX node of a torch.export program as one graph node that calls its operator through the
// dispatcher (DispatcherNodeOp).

#include <string>

#include "import/exported_arguments.h"
#include "import/schema_alias_edges.h"

namespace opara {

// Adds `node` to `graph` as a call of `target` (the node's own, or its in-place twin): its named
// arguments are matched to the operator's schema (missing ones take the schema's defaults), its
// outputs join `names.values`. Returns what the schema says about memory (views, in-place writes)
// for add_schema_alias_edges. Throws opara::Error naming `path`, the node and what to do for a node
// opara cannot run.
NodeAliasing add_exported_node(const ep::Node& node, const std::string& target, const std::string& path,
                               ExportedNames& names, Graph& graph);

}  // namespace opara
