// SIR+ Alg. 1 (Comm+SD), then a makespan check of each move.
//
// The rule: a node belongs on the CPU when cpu_us + transfers < gpu_us + alpha, the transfers
// being the copies that placement needs given where its neighbours are (sides.h). Start from SD
// (transfers ignored: every node with cpu_us < gpu_us + alpha on the CPU) and pass over the graph
// in topological order applying the rule, until a pass changes nothing. Example, alpha 100:
//
//   x -> a -> b -> y      a: gpu 50, cpu 60; b: gpu 50, cpu 60; 40 us per copy either way
//                         SD: a, b on the CPU. Pass 1: a costs 60 + 40 (x in) < 150, stays;
//                         b costs 60 + 40 (y out) < 150, stays. Pass 2 changes nothing.
//   With 100 us per copy: a costs 160 >= 150 and goes back; then b reads a on the GPU: 260 >=
//   150, back too. Pass 2 changes nothing: all on the GPU.
//
// Note [The loop converges]: after SD only CPU -> GPU moves happen. A node sent back failed the
// rule; each later move puts a neighbour on the GPU, which never removes a copy the node would
// need on the CPU, so it keeps failing. So every pass but the last sends at least one node back:
// at most nodes + 1 passes, and the fixed point satisfies the rule for every node. The cap
// (CommSdOptions::max_iterations) is SIR+'s, kept as a guard.
//
// The rule sees one node at a time; it misses the cost of splitting a graph and whether the move
// shortens the critical path. So the moves, in groups of connected nodes (a chain on the CPU
// pays its copies once), are tried one group at a time against estimate_makespan and kept only
// when the estimate drops; the whole set is tried too, for groups that only pay off together.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "opara/error.h"
#include "opara/placement.h"
#include "overflow/placements.h"
#include "overflow/sides.h"

namespace opara {
namespace {

class CommSd {
 public:
  CommSd(const Graph& graph, const PlacementCosts& costs, const CommSdOptions& options)
      : graph_(graph), costs_(costs), options_(options), is_output_(model_output_mask(graph)) {}

  PlacementReport run() {
    PlacementReport report;
    std::vector<Placement> rule = fixed_point(report);
    const std::vector<Placement> none = gpu_placement(graph_);
    for (NodeId id = 0; id < static_cast<NodeId>(graph_.size()); ++id) {
      if (rule[id] == Placement::kCpu && none[id] != Placement::kCpu) report.rule_moves.push_back(id);
    }
    report.none_us = estimate(none);
    report.placement = options_.confirm_by_estimate ? confirmed(none, rule, report) : rule;
    report.chosen_us = options_.confirm_by_estimate ? report.chosen_us : estimate(report.placement);
    for (NodeId id = 0; id < static_cast<NodeId>(graph_.size()); ++id) {
      if (report.placement[id] == Placement::kCpu) report.moved.push_back(id);
    }
    return report;
  }

 private:
  [[nodiscard]] bool rule_says_cpu(const std::vector<Placement>& placement, const Node& node) const {
    const double transfers = overflow::cpu_transfer_us(graph_, placement, costs_, is_output_, node);
    return costs_.cpu_us[node.id] + transfers < costs_.gpu_us[node.id] + costs_.alpha_us;
  }

  std::vector<Placement> fixed_point(PlacementReport& report) const {
    std::vector<bool> slowdown_ok(graph_.size(), false);
    for (NodeId id = 0; id < static_cast<NodeId>(graph_.size()); ++id) {
      slowdown_ok[id] = costs_.cpu_us[id] < costs_.gpu_us[id] + costs_.alpha_us;
    }
    std::vector<Placement> placement = placement_with_cpu_nodes(graph_, slowdown_ok);
    while (report.iterations < options_.max_iterations) {
      bool changed = false;
      for (const Node& node : graph_.nodes()) {
        if (placement[node.id] == Placement::kHost) continue;
        Placement next = placement[node.id];
        if (!node.has(kLaunchesKernel)) {
          next = overflow::follow_producer(graph_, placement, node);
        } else {
          next = rule_says_cpu(placement, node) ? Placement::kCpu : Placement::kGpu;
        }
        changed = changed || next != placement[node.id];
        placement[node.id] = next;
      }
      ++report.iterations;
      if (!changed) {
        report.converged = true;
        break;
      }
    }
    return placement;
  }

  [[nodiscard]] double estimate(const std::vector<Placement>& placement) const {
    return estimate_makespan(graph_, placement, costs_, options_.gpu_streams, options_.host_threads);
  }

  // The rule's moves in groups connected by edges between moved nodes, each ascending, the groups
  // by their first node.
  [[nodiscard]] std::vector<std::vector<NodeId>> groups(const std::vector<NodeId>& moves) const {
    std::vector<int> group_of(graph_.size(), -1);
    for (NodeId id : moves) group_of[id] = 0;  // moved, not yet grouped: -1 means not moved
    std::vector<std::vector<NodeId>> result;
    for (NodeId start : moves) {
      if (group_of[start] != 0) continue;
      result.emplace_back();
      const int index = static_cast<int>(result.size());
      std::vector<NodeId> stack{start};
      group_of[start] = index;
      while (!stack.empty()) {
        const Node& node = graph_.node(stack.back());
        stack.pop_back();
        result.back().push_back(node.id);
        for (const auto* neighbours : {&node.predecessors, &node.successors}) {
          for (NodeId next : *neighbours) {
            if (group_of[next] == 0) {
              group_of[next] = index;
              stack.push_back(next);
            }
          }
        }
      }
      std::sort(result.back().begin(), result.back().end());
    }
    return result;
  }

  std::vector<Placement> confirmed(const std::vector<Placement>& none, const std::vector<Placement>& rule,
                                   PlacementReport& report) const {
    std::vector<Placement> best = none;
    double best_us = report.none_us;
    for (const std::vector<NodeId>& group : groups(report.rule_moves)) {
      ++report.moves_tried;
      std::vector<Placement> trial = best;
      for (NodeId id : group) trial[id] = Placement::kCpu;
      const double trial_us = estimate(trial);
      if (trial_us < best_us) {
        best = std::move(trial);
        best_us = trial_us;
        ++report.moves_kept;
      }
    }
    if (report.moves_kept < report.moves_tried && report.moves_tried > 1) {
      const double all_us = estimate(rule);
      if (all_us < best_us) {
        best = rule;
        best_us = all_us;
        report.moves_kept = report.moves_tried;
      }
    }
    report.chosen_us = best_us;
    return best;
  }

  const Graph& graph_;
  const PlacementCosts& costs_;
  const CommSdOptions& options_;
  const std::vector<bool> is_output_;
};

}  // namespace

PlacementReport comm_sd_placement(const Graph& graph, const PlacementCosts& costs, const CommSdOptions& options) {
  overflow::check_sizes(graph, costs);
  if (options.max_iterations < 1) {
    throw Error(fmt::format("comm_sd_placement: max_iterations must be at least 1, not {}", options.max_iterations));
  }
  return CommSd(graph, costs, options).run();
}

}  // namespace opara
