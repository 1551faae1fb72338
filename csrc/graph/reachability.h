#pragma once

#include <cstdint>
#include <vector>

#include "opara/graph.h"

namespace opara {

// Exported for the tests and later stages (plan validation). Which nodes each node reaches through one or more edges,
// as one bitset per node. Quadratic in memory (n^2 / 8 bytes: 1 MB for 3,000 nodes), which every model we target fits
// comfortably.
class Reachability {
 public:
  explicit Reachability(const Graph& graph);

  [[nodiscard]] bool reaches(NodeId from, NodeId to) const {
    return (rows_[from][static_cast<std::size_t>(to) / 64] >> (static_cast<std::size_t>(to) % 64)) & 1u;
  }

 private:
  std::vector<std::vector<std::uint64_t>> rows_;
};

}  // namespace opara
