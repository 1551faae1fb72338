#pragma once

#include <cstdint>
#include <vector>

#include "opara/plan.h"

namespace opara {

// Note [Searched priorities]
// The CPU executor is a list scheduler: a free worker takes the ready stream whose next node has
// the highest priority. Longest-remaining-path priorities are the textbook choice, and on
// branchy they are not the best one: after a block's first 3x3 convolution they start the 5x5
// convolution (the longer path), where continuing the 3x3 chain lets the worker that finishes the
// pooling take that chain's last node, and the block ends sooner in the replay (two workers,
// 1-thread node times; tests/cpp/tuning/test_schedule_search.cpp). So the tuner replays the executor's
// dispatch rule on node times measured in its warm-up runs (`simulate_cpu_schedule`), searches priorities that shorten
// the replayed runs
// (`search_priorities`), and times the result against the critical-path priorities: the search
// proposes, the timing rounds decide.

// Node times of one run, microseconds by NodeId (no-stream nodes are not replayed).
using NodeTimes = std::vector<double>;

// When a replay of `plan` on `workers` workers with these priorities ends, in microseconds: each
// free worker takes the ready stream whose next node has the highest priority (ties: the earlier
// in launch order), a stream is ready when its previous node is done and the events its next node
// waits on are recorded, and each node costs its time plus `handoff_us`. Throws opara::Error for
// times or priorities not one per node, or fewer than one worker. The plan must be valid
// (require_valid): one that waits on an event no node records is a bug (opara::InternalError).
double simulate_cpu_schedule(const Plan& plan, const NodeTimes& times, const std::vector<double>& priorities,
                             int workers, double handoff_us = 1.0);

// Each node's longest path to the end through the plan's orders (its stream's next node and the
// nodes waiting on its event), in `times`: critical-path priorities for a plan alone.
std::vector<double> plan_path_priorities(const Plan& plan, const NodeTimes& times);

struct PrioritySearchOptions {
  int iterations = 4000;  // perturbed priority sets tried; each replays every run once
  double budget_ms = 0;   // more than 0: stop sooner once this has passed (large graphs)
  std::uint64_t seed = 1;
  double handoff_us = 1.0;
};

struct PrioritySearch {
  std::vector<double> priorities;  // the best found: `start` itself when nothing replayed shorter
  double start_us = 0;             // mean replayed run time with `start`
  double best_us = 0;              // with `priorities`
};

// Hill climbing from `start` (empty: plan_path_priorities of the runs' mean times): perturbs the
// best set so far (every priority scaled or shifted at random, or one moved far) and keeps a set
// only when the mean replayed time over `runs` (one NodeTimes each) is shorter. Several runs keep
// it from fitting one run's noise. Deterministic for a seed, without a budget.
PrioritySearch search_priorities(const Plan& plan, const std::vector<NodeTimes>& runs, std::vector<double> start,
                                 int workers, const PrioritySearchOptions& options = {});

}  // namespace opara
