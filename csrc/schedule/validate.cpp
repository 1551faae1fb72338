// The proof that a plan is correct, checked independently of how the plan was made.
//
// Execution model (Plan): the host launches nodes in launch order; a stream runs its nodes in that
// order; a wait blocks its stream until the event recorded after the waited node has fired.
// A plan is correct when
//   1. the launch order is topological;
//   2. every wait names a kernel node launched earlier that records an event (so no wait is ever
//      on an event not yet recorded, and since each stream follows launch order, every wait is
//      satisfied by work launched before it: no deadlock);
//   3. every dependency u -> v between kernel nodes (through kernel-free nodes too) is ordered by
//      happens-before: same-stream order plus waits, transitively;
//   4. with regions: every kernel node is in one, kernel-free nodes in none; each region's nodes
//      share a stream and follow each other on it, and the regions form a DAG (a region can run as
//      one unit once what it depends on has).
// (3) is checked with vector clocks over batches of streams: clock[v][t] is the last position on
// stream t that happens before v; u -> v holds when clock[v][stream of u] >= position of u.
#include <fmt/format.h>

#include <algorithm>

#include "graph/graph_analysis.h"
#include "opara/error.h"
#include "opara/plan.h"
#include "schedule/kernel_dag.h"

namespace opara {
namespace {

constexpr std::size_t kMaxProblems = 20;
constexpr int kStreamBatch = 64;

class Validator {
 public:
  Validator(const Graph& graph, const Plan& plan) : graph_(graph), plan_(plan) {}

  std::vector<std::string> run() {
    const std::size_t count = graph_.size();
    if (plan_.stream_of.size() != count || plan_.waits.size() != count || plan_.records.size() != count) {
      report(fmt::format("the plan is for {} nodes (streams), {} (waits), {} (records); the graph has {}",
                         plan_.stream_of.size(), plan_.waits.size(), plan_.records.size(), count));
      return problems_;
    }
    if (!check_launch_order()) return problems_;
    dag_ = kernel_dag(graph_);
    if (!check_streams() || !check_waits()) return problems_;
    check_dependencies();
    if (!plan_.region_of.empty()) check_regions();
    return problems_;
  }

 private:
  void report(std::string problem) {
    if (problems_.size() < kMaxProblems) problems_.push_back(std::move(problem));
  }

  std::string on_stream(NodeId node) const {
    return fmt::format("{} on stream {}", graph_.describe(node), plan_.stream_of[node]);
  }

  bool check_launch_order() {
    const std::size_t count = graph_.size();
    position_.assign(count, -1);
    for (std::size_t i = 0; i < plan_.launch_order.size(); ++i) {
      const NodeId node = plan_.launch_order[i];
      if (node < 0 || node >= static_cast<NodeId>(count)) {
        report(fmt::format("launch order entry {} is node {}, which does not exist", i, node));
      } else if (position_[node] != -1) {
        report(fmt::format("{} is launched twice (positions {} and {})", graph_.describe(node), position_[node], i));
      } else {
        position_[node] = static_cast<std::int32_t>(i);
      }
    }
    for (const Node& node : graph_.nodes()) {
      if (position_[node.id] == -1) report(fmt::format("{} is never launched", graph_.describe(node.id)));
    }
    if (!problems_.empty()) return false;
    for (const Edge& edge : graph_.edges()) {
      if (position_[edge.from] > position_[edge.to]) {
        report(fmt::format("launch order is not topological: {} is launched before {}, which it depends on",
                           graph_.describe(edge.to), graph_.describe(edge.from)));
      }
    }
    return problems_.empty();
  }

  bool check_streams() {
    for (const Node& node : graph_.nodes()) {
      const int stream = plan_.stream_of[node.id];
      if (dag_.is_kernel(node.id) && (stream < 0 || stream >= plan_.stream_count)) {
        report(fmt::format("{} launches kernels but has stream {} (the plan has {} streams)", graph_.describe(node.id),
                           stream, plan_.stream_count));
      } else if (!dag_.is_kernel(node.id) && stream != kNoStream) {
        report(fmt::format("{} launches no kernel but is given stream {}", graph_.describe(node.id), stream));
      }
    }
    return problems_.empty();
  }

  bool check_waits() {
    const auto count = static_cast<NodeId>(graph_.size());
    for (NodeId node = 0; node < count; ++node) {
      for (NodeId waited : plan_.waits[node]) {
        if (!dag_.is_kernel(node)) {
          report(fmt::format("{} launches no kernel, so it cannot wait on events", graph_.describe(node)));
        } else if (waited < 0 || waited >= count || !dag_.is_kernel(waited)) {
          report(fmt::format("{} waits on node {}, which launches no kernel or does not exist", graph_.describe(node),
                             waited));
        } else if (!plan_.records[waited]) {
          report(
              fmt::format("{} waits on the event of {}, which never records one", on_stream(node), on_stream(waited)));
        } else if (position_[waited] >= position_[node]) {
          report(fmt::format("{} waits on the event of {}, which is recorded only later in launch order",
                             on_stream(node), on_stream(waited)));
        }
      }
    }
    return problems_.empty();
  }

  void check_dependencies() {
    const std::size_t count = graph_.size();
    // Position of each kernel node on its stream.
    std::vector<std::int32_t> slot(count, -1);
    std::vector<std::int32_t> next_slot(static_cast<std::size_t>(plan_.stream_count), 0);
    std::vector<NodeId> previous_on(count, kNoNode);  // by node: the node before it on its stream
    std::vector<NodeId> last_on(static_cast<std::size_t>(plan_.stream_count), kNoNode);
    for (NodeId node : plan_.launch_order) {
      if (!dag_.is_kernel(node)) continue;
      const int stream = plan_.stream_of[node];
      slot[node] = next_slot[stream]++;
      previous_on[node] = last_on[stream];
      last_on[stream] = node;
    }
    std::vector<std::int32_t> clock(count * kStreamBatch);
    for (int first = 0; first < plan_.stream_count; first += kStreamBatch) {
      const int batch = std::min(kStreamBatch, plan_.stream_count - first);
      auto row = [&](NodeId node) { return clock.begin() + static_cast<std::ptrdiff_t>(node) * kStreamBatch; };
      for (NodeId node : plan_.launch_order) {
        if (!dag_.is_kernel(node)) continue;
        auto own = row(node);
        std::fill(own, own + batch, -1);
        auto join = [&](NodeId before) {
          auto theirs = row(before);
          for (int t = 0; t < batch; ++t) own[t] = std::max(own[t], theirs[t]);
        };
        if (previous_on[node] != kNoNode) join(previous_on[node]);
        for (NodeId waited : plan_.waits[node]) join(waited);
        const int stream = plan_.stream_of[node];
        if (stream >= first && stream < first + batch) own[stream - first] = slot[node];
      }
      for (NodeId node = 0; node < static_cast<NodeId>(count); ++node) {
        if (!dag_.is_kernel(node)) continue;
        for (NodeId before : dag_.predecessors[node]) {
          const int stream = plan_.stream_of[before];
          if (stream < first || stream >= first + batch) continue;
          if (row(node)[stream - first] < slot[before]) {
            report(fmt::format("{} depends on {}, but no stream order or wait makes it run after it", on_stream(node),
                               on_stream(before)));
          }
        }
      }
    }
  }

  void check_regions() {
    const std::size_t count = graph_.size();
    if (plan_.region_of.size() != count) {
      report(fmt::format("the plan gives regions for {} nodes; the graph has {}", plan_.region_of.size(), count));
      return;
    }
    const int regions = plan_.region_count;
    std::vector<int> stream_of_region(regions, kNoStream);
    std::vector<NodeId> last_of_region(regions, kNoNode);
    std::vector<NodeId> last_on_stream(plan_.stream_count, kNoNode);
    for (NodeId node : plan_.launch_order) {
      const int region = plan_.region_of[node];
      if (!dag_.is_kernel(node)) {
        if (region != kNoRegion)
          report(fmt::format("{} launches no kernel but is in region {}", graph_.describe(node), region));
        continue;
      }
      if (region < 0 || region >= regions) {
        report(fmt::format("{} is in region {} (the plan has {} regions)", graph_.describe(node), region, regions));
        return;
      }
      const int stream = plan_.stream_of[node];
      if (stream_of_region[region] == kNoStream) {
        stream_of_region[region] = stream;
      } else if (stream_of_region[region] != stream) {
        report(fmt::format("region {} spans streams {} and {} ({})", region, stream_of_region[region], stream,
                           on_stream(node)));
      } else if (last_on_stream[stream] != last_of_region[region]) {
        report(fmt::format("region {} is not contiguous on stream {}: {} runs inside it", region, stream,
                           graph_.describe(last_on_stream[stream])));
      }
      last_of_region[region] = node;
      last_on_stream[stream] = node;
    }
    // A DAG: Kahn's algorithm over the edges between regions takes every region.
    std::vector<std::vector<int>> successors(regions);
    std::vector<int> indegree(regions, 0);
    for (NodeId node = 0; node < static_cast<NodeId>(count); ++node) {
      if (!dag_.is_kernel(node)) continue;
      for (NodeId before : dag_.predecessors[node]) {
        const int from = plan_.region_of[before];
        const int to = plan_.region_of[node];
        if (from == to) continue;
        successors[from].push_back(to);
        ++indegree[to];
      }
    }
    std::vector<int> ready;
    for (int region = 0; region < regions; ++region)
      if (indegree[region] == 0) ready.push_back(region);
    int taken = 0;
    while (!ready.empty()) {
      const int region = ready.back();
      ready.pop_back();
      ++taken;
      for (int next : successors[region])
        if (--indegree[next] == 0) ready.push_back(next);
    }
    if (taken != regions) {
      report(fmt::format("the regions form a cycle: {} of {} regions depend on each other in a ring", regions - taken,
                         regions));
    }
  }

  const Graph& graph_;
  const Plan& plan_;
  KernelDag dag_;
  std::vector<std::int32_t> position_;
  std::vector<std::string> problems_;
};

}  // namespace

std::vector<std::string> validate(const Graph& graph, const Plan& plan) {
  return Validator(graph, plan).run();
}

void require_valid(const Graph& graph, const Plan& plan) {
  const std::vector<std::string> problems = validate(graph, plan);
  if (problems.empty()) return;
  std::string message =
      fmt::format("{}: invalid plan ({} {}, {} streams):", graph.source_path.empty() ? "graph" : graph.source_path,
                  to_string(plan.stream_policy), to_string(plan.order_policy), plan.stream_count);
  for (const std::string& problem : problems) message += "\n  " + problem;
  throw Error(message);
}

}  // namespace opara
