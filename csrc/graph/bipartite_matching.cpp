// Hopcroft-Karp: breadth-first layering from the free left vertices, then vertex-disjoint
// shortest augmenting paths by depth-first search, until no augmenting path remains.
#include "graph/bipartite_matching.h"

#include <limits>
#include <queue>

namespace opara {
namespace {

class HopcroftKarp {
 public:
  HopcroftKarp(const std::vector<std::vector<int>>& adjacency, int right_count)
      : adjacency_(adjacency),
        match_left_(adjacency.size(), -1),
        match_right_(static_cast<std::size_t>(right_count), -1),
        layer_(adjacency.size(), 0) {}

  std::vector<int> solve() {
    while (build_layers()) {
      next_edge_.assign(adjacency_.size(), 0);
      for (std::size_t left = 0; left < adjacency_.size(); ++left) {
        if (match_left_[left] == -1) augment(static_cast<int>(left));
      }
    }
    return match_left_;
  }

 private:
  static constexpr int kUnreached = std::numeric_limits<int>::max();

  // Layers the left vertices by alternating-path distance from the free ones; true when some
  // free right vertex is reachable, i.e. an augmenting path exists.
  bool build_layers() {
    std::queue<int> queue;
    for (std::size_t left = 0; left < adjacency_.size(); ++left) {
      layer_[left] = match_left_[left] == -1 ? 0 : kUnreached;
      if (layer_[left] == 0) queue.push(static_cast<int>(left));
    }
    bool found = false;
    while (!queue.empty()) {
      const int left = queue.front();
      queue.pop();
      for (int right : adjacency_[left]) {
        const int partner = match_right_[right];
        if (partner == -1) {
          found = true;
        } else if (layer_[partner] == kUnreached) {
          layer_[partner] = layer_[left] + 1;
          queue.push(partner);
        }
      }
    }
    return found;
  }

  // Iterative depth-first search along the layers; flips the path when it ends at a free vertex.
  bool augment(int start) {
    std::vector<int> path{start};
    while (!path.empty()) {
      const int left = path.back();
      auto& edge = next_edge_[left];
      if (edge == adjacency_[left].size()) {
        layer_[left] = kUnreached;  // dead end: never try it again in this phase
        path.pop_back();
        continue;
      }
      const int right = adjacency_[left][edge++];
      const int partner = match_right_[right];
      if (partner == -1) {
        for (auto it = path.rbegin(); it != path.rend(); ++it) {
          // Each left vertex on the path takes the right vertex its search just chose.
          const int l = *it;
          const int r = adjacency_[l][next_edge_[l] - 1];
          match_right_[r] = l;
          match_left_[l] = r;
        }
        return true;
      }
      if (layer_[partner] == layer_[left] + 1) path.push_back(partner);
    }
    return false;
  }

  const std::vector<std::vector<int>>& adjacency_;
  std::vector<int> match_left_;
  std::vector<int> match_right_;
  std::vector<int> layer_;
  std::vector<std::size_t> next_edge_;
};

}  // namespace

std::vector<int> maximum_bipartite_matching(const std::vector<std::vector<int>>& adjacency, int right_count) {
  return HopcroftKarp(adjacency, right_count).solve();
}

}  // namespace opara
