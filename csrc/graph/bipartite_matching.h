#pragma once

#include <vector>

namespace opara {

// Maximum matching in a bipartite graph by Hopcroft-Karp, O(E sqrt(V)). `adjacency[l]` lists the
// right vertices (0 .. right_count-1) that left vertex l may be matched to. Returns, for each left
// vertex, its matched right vertex or -1.
std::vector<int> maximum_bipartite_matching(const std::vector<std::vector<int>>& adjacency, int right_count);

}  // namespace opara
