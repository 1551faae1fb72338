#pragma once

#include <vector>

namespace opara {

// Transitive reduction of a DAG given as successor lists, where vertex ids are a topological order
// and each list is sorted. Returns the successor lists keeping only the edges no longer path
// implies. Quadratic memory (one reachability bitset per vertex).
std::vector<std::vector<int>> reduce_transitively(const std::vector<std::vector<int>>& successors);

}  // namespace opara
