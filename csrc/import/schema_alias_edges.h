#pragma once

#include <utility>
#include <vector>

#include "opara/graph.h"

namespace opara {

// What one node's schema says about memory: which outputs are views of which inputs, and which
// inputs it writes in place.
struct NodeAliasing {
  std::vector<std::pair<ValueId, ValueId>> views;  // (output, input it aliases)
  std::vector<ValueId> writes;
};

// Adds the ordering edges that in-place writes need (Note [Ordering edges] in
// torchscript_import.cpp) for graphs without LibTorch's alias analysis, from the schemas'
// alias annotations: values joined by views form one alias class; a node that writes a class is
// ordered after every earlier node touching it and before every later one. `aliasing` has one
// entry per node. Returns the number of edges added.
std::size_t add_schema_alias_edges(Graph& graph, const std::vector<NodeAliasing>& aliasing);

}  // namespace opara
