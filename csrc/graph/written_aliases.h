#pragma once

// Which values may share memory with a value some node writes in place.

#include <vector>

#include "opara/graph.h"

namespace opara {

// Per value, the root of its alias group, and whether a node writes into that group. Values are
// joined through a node that writes in place (its `self` and its results) and through nodes that
// launch no kernel (views, lists and tuples of tensors, unpacking: what comes out may be what went
// in).
struct WrittenAliases {
  std::vector<ValueId> group;  // by value
  std::vector<bool> written;   // by root
};

WrittenAliases written_aliases(const Graph& graph);

}  // namespace opara
