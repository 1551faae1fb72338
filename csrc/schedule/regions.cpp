// Regions: cut a plan's streams at their cross-stream dependencies, merge the regions too small to
// be worth running beside others, and lay each region out contiguously (regions.h).
#include "schedule/regions.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <queue>
#include <tuple>

#include "support/internal_assert.h"

namespace opara {
namespace {

// Cut: a kernel node opens a region when it is its stream's first, when it depends on another
// stream, or when its stream's previous node has a dependant on another stream. Regions are
// numbered by their first node's launch, which is a topological order of the regions.
std::vector<int> cut_regions(const KernelDag& dag, const Plan& plan) {
  const std::size_t count = plan.stream_of.size();
  auto crosses = [&](NodeId a, NodeId b) { return plan.stream_of[a] != plan.stream_of[b]; };
  std::vector<std::uint8_t> has_dependant_elsewhere(count, 0);
  for (NodeId node = 0; node < static_cast<NodeId>(count); ++node) {
    if (!dag.is_kernel(node)) continue;
    for (NodeId successor : dag.successors[node]) has_dependant_elsewhere[node] |= crosses(node, successor) ? 1 : 0;
  }
  std::vector<int> region_of(count, kNoRegion);
  std::vector<NodeId> last_on_stream(plan.stream_count, kNoNode);
  int regions = 0;
  for (NodeId node : plan.launch_order) {
    if (!dag.is_kernel(node)) continue;
    const int stream = plan.stream_of[node];
    const NodeId previous = last_on_stream[stream];
    const bool waits_elsewhere = std::any_of(dag.predecessors[node].begin(), dag.predecessors[node].end(),
                                             [&](NodeId predecessor) { return crosses(predecessor, node); });
    if (previous == kNoNode || waits_elsewhere || has_dependant_elsewhere[previous]) {
      region_of[node] = regions++;
    } else {
      region_of[node] = region_of[previous];
    }
    last_on_stream[stream] = node;
  }
  return region_of;
}

// The regions as a DAG, with what the merging decisions read: costs, streams, edges, reachability.
class RegionGraph {
 public:
  RegionGraph(const KernelDag& dag, const std::vector<int>& region_of, int count, const std::vector<int>& stream_of,
              const std::vector<NodeCost>& costs)
      : count_(count), words_((static_cast<std::size_t>(count) + 63) / 64) {
    cost_.assign(count, 0.0);
    stream_.assign(count, kNoStream);
    successors_.assign(count, {});
    predecessors_.assign(count, {});
    for (NodeId node = 0; node < static_cast<NodeId>(region_of.size()); ++node) {
      const int region = region_of[node];
      if (region == kNoRegion) continue;
      cost_[region] += costs.empty() ? 1.0 : costs[node].demand;
      stream_[region] = stream_of[node];
      for (NodeId successor : dag.successors[node]) {
        const int next = region_of[successor];
        if (next != region) link(region, next);
      }
    }
    compute_reach();
  }

  [[nodiscard]] int count() const { return count_; }
  [[nodiscard]] double cost(int region) const { return cost_[region]; }
  [[nodiscard]] int stream(int region) const { return stream_[region]; }
  [[nodiscard]] const std::vector<int>& successors(int region) const { return successors_[region]; }
  [[nodiscard]] const std::vector<int>& predecessors(int region) const { return predecessors_[region]; }
  [[nodiscard]] bool reaches(int from, int to) const { return ((reach_[from][to / 64] >> (to % 64)) & 1U) != 0; }

  // The cost of the largest region that neither reaches `region` nor is reached by it (0: none).
  [[nodiscard]] double largest_beside(int region) const {
    double largest = 0;
    for (int other = 0; other < count_; ++other) {
      if (other != region && !reaches(region, other) && !reaches(other, region))
        largest = std::max(largest, cost_[other]);
    }
    return largest;
  }

  // Whether merging `from` and `to` (an edge from -> to) keeps the regions a DAG: no other path
  // from `from` reaches `to`.
  [[nodiscard]] bool merge_keeps_a_dag(int from, int to) const {
    return std::none_of(successors_[from].begin(), successors_[from].end(),
                        [&](int next) { return next != to && reaches(next, to); });
  }

 private:
  void link(int from, int to) {
    if (std::find(successors_[from].begin(), successors_[from].end(), to) != successors_[from].end()) return;
    successors_[from].push_back(to);
    predecessors_[to].push_back(from);
  }

  // Each region reaches itself and its descendants. Regions are kept numbered in a topological
  // order (OPARA_ASSERT below), so one pass from the last suffices.
  void compute_reach() {
    reach_.assign(count_, std::vector<std::uint64_t>(words_, 0));
    for (int region = count_ - 1; region >= 0; --region) {
      reach_[region][region / 64] |= std::uint64_t{1} << (region % 64);
      for (int next : successors_[region]) {
        OPARA_ASSERT(next > region, "regions are numbered in a topological order");
        for (std::size_t word = 0; word < words_; ++word) reach_[region][word] |= reach_[next][word];
      }
    }
  }

  int count_;
  std::size_t words_;
  std::vector<double> cost_;
  std::vector<int> stream_;
  std::vector<std::vector<int>> successors_;
  std::vector<std::vector<int>> predecessors_;
  std::vector<std::vector<std::uint64_t>> reach_;
};

// Renumbers regions 0..n-1 in a topological order of the region DAG, earliest first launch first;
// returns the count.
int renumber_topologically(const KernelDag& dag, const std::vector<NodeId>& launch_order, std::vector<int>& region_of) {
  std::vector<int> ids(region_of);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (!ids.empty() && ids.front() == kNoRegion) ids.erase(ids.begin());
  auto dense = [&](int region) {
    return static_cast<int>(std::lower_bound(ids.begin(), ids.end(), region) - ids.begin());
  };
  const int count = static_cast<int>(ids.size());
  std::vector<std::int32_t> first_launch(count, INT32_MAX);
  const std::vector<std::int32_t> position = positions_in(launch_order, region_of.size());
  std::vector<std::vector<int>> successors(count);
  std::vector<int> indegree(count, 0);
  for (NodeId node = 0; node < static_cast<NodeId>(region_of.size()); ++node) {
    if (region_of[node] == kNoRegion) continue;
    const int region = dense(region_of[node]);
    first_launch[region] = std::min(first_launch[region], position[node]);
    for (NodeId successor : dag.successors[node]) {
      if (region_of[successor] == kNoRegion) continue;  // kernel-free
      const int next = dense(region_of[successor]);
      if (next == region ||
          std::find(successors[region].begin(), successors[region].end(), next) != successors[region].end())
        continue;
      successors[region].push_back(next);
      ++indegree[next];
    }
  }
  using Ready = std::pair<std::int32_t, int>;  // first launch, region
  std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready;
  for (int region = 0; region < count; ++region)
    if (indegree[region] == 0) ready.emplace(first_launch[region], region);
  std::vector<int> rank(count, -1);
  int next_rank = 0;
  while (!ready.empty()) {
    const int region = ready.top().second;
    ready.pop();
    rank[region] = next_rank++;
    for (int next : successors[region])
      if (--indegree[next] == 0) ready.emplace(first_launch[next], next);
  }
  OPARA_ASSERT(next_rank == count, "the regions form a cycle");
  for (int& region : region_of)
    if (region != kNoRegion) region = rank[dense(region)];
  return count;
}

// A launch order in which each region's nodes are contiguous: regions by rank, each region's
// nodes in their old launch order, a kernel-free node as soon as what it reads is launched.
std::vector<NodeId> contiguous_launch_order(const Graph& graph, const std::vector<int>& region_of,
                                            const std::vector<NodeId>& launch_order) {
  const std::size_t count = region_of.size();
  const std::vector<std::int32_t> position = positions_in(launch_order, count);
  std::vector<int> waiting(count, 0);
  for (const Node& node : graph.nodes()) waiting[node.id] = static_cast<int>(node.predecessors.size());
  // The graph's own edges (a kernel-free node must come before its users), each region's nodes
  // kept together by the key: a kernel-free node goes as soon as it is ready, and the smallest
  // unlaunched kernel node (by region rank, then old position) is always ready, since what it
  // depends on is in earlier regions or earlier in its own.
  using Key = std::tuple<int, std::int32_t, NodeId>;  // region rank (-1: kernel-free), old position
  std::priority_queue<Key, std::vector<Key>, std::greater<>> ready;
  for (NodeId node = 0; node < static_cast<NodeId>(count); ++node)
    if (waiting[node] == 0) ready.emplace(region_of[node], position[node], node);
  std::vector<NodeId> order;
  order.reserve(count);
  while (!ready.empty()) {
    const NodeId node = std::get<2>(ready.top());
    ready.pop();
    order.push_back(node);
    for (NodeId dependant : graph.node(node).successors)
      if (--waiting[dependant] == 0) ready.emplace(region_of[dependant], position[dependant], dependant);
  }
  OPARA_ASSERT(order.size() == count, "the launch order lost nodes");
  return order;
}

// Streams numbered by first launch, without the ones merging emptied.
int compact_streams(const std::vector<NodeId>& launch_order, std::vector<int>& stream_of) {
  std::vector<int> renamed(stream_of.size() + 1, kNoStream);
  int streams = 0;
  for (NodeId node : launch_order) {
    int& stream = stream_of[node];
    if (stream == kNoStream) continue;
    if (renamed[stream] == kNoStream) renamed[stream] = streams++;
    stream = renamed[stream];
  }
  return streams;
}

// One merge of a small region into a neighbour, or false when none is small and mergeable. A
// merged region starts once everything either part waited for is done, and its dependants wait
// for all of it, so a small region is
//   - appended to a predecessor when each of its other predecessors comes before that one anyway
//     (the predecessor starts no later; its other dependants wait at most the small one's cost),
//   - or else prepended to its only successor (nothing else waits for it, and that successor
//     waited for everything it waits for);
// never when that would close a cycle.
bool merge_one(const RegionGraph& regions, double min_share, std::vector<int>& region_of, std::vector<int>& stream_of) {
  std::vector<int> by_cost(regions.count());
  std::iota(by_cost.begin(), by_cost.end(), 0);
  std::stable_sort(by_cost.begin(), by_cost.end(), [&](int a, int b) { return regions.cost(a) < regions.cost(b); });
  for (int small : by_cost) {
    const double beside = regions.largest_beside(small);
    if (beside > 0 && regions.cost(small) >= min_share * beside) continue;
    int target = -1;
    // A predecessor: on the same stream first, then the costliest.
    std::vector<int> predecessors = regions.predecessors(small);
    std::stable_sort(predecessors.begin(), predecessors.end(), [&](int a, int b) {
      const bool a_same = regions.stream(a) == regions.stream(small);
      const bool b_same = regions.stream(b) == regions.stream(small);
      return a_same != b_same ? a_same : regions.cost(a) > regions.cost(b);
    });
    for (int predecessor : predecessors) {
      const std::vector<int>& others = regions.predecessors(small);
      const bool starts_no_later = std::all_of(others.begin(), others.end(), [&](int other) {
        return other == predecessor || regions.reaches(other, predecessor);
      });
      if (starts_no_later && regions.merge_keeps_a_dag(predecessor, small)) {
        target = predecessor;
        break;
      }
    }
    if (target < 0 && regions.successors(small).size() == 1 &&
        regions.merge_keeps_a_dag(small, regions.successors(small).front())) {
      target = regions.successors(small).front();
    }
    if (target < 0) continue;
    for (NodeId node = 0; node < static_cast<NodeId>(region_of.size()); ++node) {
      if (region_of[node] != small) continue;
      region_of[node] = target;
      stream_of[node] = regions.stream(target);
    }
    return true;
  }
  return false;
}

}  // namespace

void form_regions(const Graph& graph, const KernelDag& dag, const std::vector<NodeCost>& costs, double min_share,
                  Plan& plan) {
  std::vector<int> region_of = cut_regions(dag, plan);
  int count = renumber_topologically(dag, plan.launch_order, region_of);
  while (count > 1 && count <= kMergeLimit) {
    const RegionGraph regions(dag, region_of, count, plan.stream_of, costs);
    if (!merge_one(regions, min_share, region_of, plan.stream_of)) break;
    count = renumber_topologically(dag, plan.launch_order, region_of);
  }
  plan.launch_order = contiguous_launch_order(graph, region_of, plan.launch_order);
  plan.stream_count = compact_streams(plan.launch_order, plan.stream_of);
  plan.region_of = std::move(region_of);
  plan.region_count = count;
}

}  // namespace opara
