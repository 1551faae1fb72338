#pragma once

// Union-find over a graph's values: the classes of values that may share memory.

#include <cstddef>
#include <numeric>
#include <vector>

#include "opara/graph.h"

namespace opara {

class AliasClasses {
 public:
  explicit AliasClasses(std::size_t values) : parent_(values) { std::iota(parent_.begin(), parent_.end(), 0); }

  ValueId find(ValueId value) {
    while (parent_[value] != value) value = parent_[value] = parent_[parent_[value]];
    return value;
  }

  void join(ValueId a, ValueId b) { parent_[find(a)] = find(b); }

 private:
  std::vector<ValueId> parent_;
};

}  // namespace opara
