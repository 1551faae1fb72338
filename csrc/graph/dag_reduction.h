#pragma once

#include <cstdint>
#include <vector>

namespace opara {

// Transitive reduction of a DAG given as successor lists, where vertex ids are a topological order
// and each list is sorted. Returns the successor lists keeping only the edges no longer path
// implies. Quadratic memory (one reachability bitset per vertex).
std::vector<std::vector<int>> reduce_transitively(const std::vector<std::vector<int>>& successors);

// Which vertices each vertex reaches through one or more edges (the transitive closure, without
// the vertex itself), one bitset of 64-bit words per vertex, for successor lists whose vertex ids
// are a topological order.
std::vector<std::vector<std::uint64_t>> reachable_sets(const std::vector<std::vector<int>>& successors);

inline bool reaches(const std::vector<std::vector<std::uint64_t>>& reach, int from, int to) {
  return (reach[from][static_cast<std::size_t>(to) / 64] >> (static_cast<std::size_t>(to) % 64)) & 1u;
}

}  // namespace opara
