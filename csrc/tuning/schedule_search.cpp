#include "tuning/schedule_search.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <random>

#include "opara/error.h"
#include "support/elapsed.h"
#include "support/internal_assert.h"

namespace opara {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

void require_per_node(const Plan& plan, std::size_t count, const char* what) {
  if (count != plan.stream_of.size()) {
    throw Error(fmt::format("schedule replay: {} {} for a plan of {} nodes", count, what, plan.stream_of.size()));
  }
}

// The replay's fixed part: each stream's nodes, and each node's launch position for ties.
struct Replay {
  explicit Replay(const Plan& plan) : plan(plan), streams(plan.stream_nodes()), position(plan.stream_of.size()) {
    for (std::size_t k = 0; k < plan.launch_order.size(); ++k) position[plan.launch_order[k]] = static_cast<int>(k);
  }

  double run(const NodeTimes& times, const std::vector<double>& priorities, int workers, double handoff_us) const {
    std::vector<double> done(plan.stream_of.size(), kNever);
    std::vector<std::size_t> next(streams.size(), 0);
    std::vector<double> stream_free(streams.size(), 0);
    std::vector<double> worker_free(static_cast<std::size_t>(workers), 0);
    std::size_t left = 0;
    for (const auto& nodes : streams) left += nodes.size();
    double end = 0;
    while (left > 0) {
      const auto worker = std::min_element(worker_free.begin(), worker_free.end());
      const double now = *worker;
      int chosen = -1;
      double soonest = kNever;  // when the next stream becomes ready, if none is now
      for (std::size_t s = 0; s < streams.size(); ++s) {
        if (next[s] == streams[s].size()) continue;
        const NodeId node = streams[s][next[s]];
        double ready = stream_free[s];
        for (NodeId event : plan.waits[node]) ready = std::max(ready, done[event]);
        if (ready > now) {
          soonest = std::min(soonest, ready);
          continue;
        }
        if (chosen < 0) {
          chosen = static_cast<int>(s);
          continue;
        }
        const NodeId best = streams[chosen][next[chosen]];
        if (priorities[node] > priorities[best] ||
            (priorities[node] == priorities[best] && position[node] < position[best])) {
          chosen = static_cast<int>(s);
        }
      }
      if (chosen < 0) {
        // Nothing ready: this worker idles until something is (a valid plan never waits forever).
        OPARA_ASSERT(soonest != kNever, "schedule replay: the plan waits on an event no node records");
        *worker = soonest;
        continue;
      }
      const NodeId node = streams[chosen][next[chosen]++];
      done[node] = now + times[node] + handoff_us;
      stream_free[chosen] = done[node];
      *worker = done[node];
      end = std::max(end, done[node]);
      --left;
    }
    return end;
  }

  const Plan& plan;
  std::vector<std::vector<NodeId>> streams;
  std::vector<int> position;
};

double mean_replay(const Replay& replay, const std::vector<NodeTimes>& runs, const std::vector<double>& priorities,
                   int workers, double handoff_us) {
  double sum = 0;
  for (const NodeTimes& times : runs) sum += replay.run(times, priorities, workers, handoff_us);
  return sum / static_cast<double>(runs.size());
}

}  // namespace

double simulate_cpu_schedule(const Plan& plan, const NodeTimes& times, const std::vector<double>& priorities,
                             int workers, double handoff_us) {
  require_per_node(plan, times.size(), "node times");
  require_per_node(plan, priorities.size(), "priorities");
  if (workers < 1) throw Error(fmt::format("schedule replay: {} workers; at least one runs the plan", workers));
  return Replay(plan).run(times, priorities, workers, handoff_us);
}

std::vector<double> plan_path_priorities(const Plan& plan, const NodeTimes& times) {
  require_per_node(plan, times.size(), "node times");
  // Successors through the plan's orders: the stream's next node, and every node waiting on one's event.
  std::vector<std::vector<NodeId>> after(plan.stream_of.size());
  for (const auto& nodes : plan.stream_nodes()) {
    for (std::size_t k = 0; k + 1 < nodes.size(); ++k) after[nodes[k]].push_back(nodes[k + 1]);
  }
  for (std::size_t node = 0; node < plan.waits.size(); ++node) {
    for (NodeId event : plan.waits[node]) after[event].push_back(static_cast<NodeId>(node));
  }
  std::vector<double> remaining(plan.stream_of.size(), 0);
  for (auto it = plan.launch_order.rbegin(); it != plan.launch_order.rend(); ++it) {  // successors first
    double longest = 0;
    for (NodeId next : after[*it]) longest = std::max(longest, remaining[next]);
    remaining[*it] = (plan.stream_of[*it] == kNoStream ? 0 : times[*it]) + longest;
  }
  return remaining;
}

namespace {

// Hill climbing from `start`: Note [Searched priorities].
PrioritySearch climb(const Replay& replay, const std::vector<NodeTimes>& runs, std::vector<double> start, int workers,
                     const PrioritySearchOptions& options, int iterations,
                     std::chrono::steady_clock::time_point started) {
  PrioritySearch result;
  result.start_us = mean_replay(replay, runs, start, workers, options.handoff_us);
  result.best_us = result.start_us;
  result.priorities = std::move(start);
  // Shifts in proportion to the priorities' spread, so the search behaves alike on any time scale.
  const auto [low, high] = std::minmax_element(result.priorities.begin(), result.priorities.end());
  const double spread = std::max(*high - *low, 1e-9);
  std::mt19937_64 random(options.seed);
  std::uniform_real_distribution<double> scale(0.7, 1.3);
  std::normal_distribution<double> shift(0.0, 0.02 * spread);
  std::normal_distribution<double> jump(0.0, 0.5 * spread);
  std::uniform_int_distribution<std::size_t> any_node(0, result.priorities.size() - 1);
  std::vector<double> trial;
  for (int iteration = 0; iteration < iterations; ++iteration) {
    if (options.budget_ms > 0 && (iteration & 15) == 0 && milliseconds_since(started) > options.budget_ms) break;
    trial = result.priorities;
    switch (iteration % 3) {
      case 0:
        for (double& priority : trial) priority *= scale(random);
        break;
      case 1:
        for (double& priority : trial) priority += shift(random);
        break;
      default: trial[any_node(random)] += jump(random);
    }
    const double replayed = mean_replay(replay, runs, trial, workers, options.handoff_us);
    if (replayed < result.best_us) {
      result.best_us = replayed;
      result.priorities.swap(trial);
    }
  }
  return result;
}

}  // namespace

PrioritySearch search_priorities(const Plan& plan, const std::vector<NodeTimes>& runs, std::vector<double> start,
                                 int workers, const PrioritySearchOptions& options) {
  if (runs.empty()) throw Error("priority search: no measured runs to replay");
  for (const NodeTimes& times : runs) require_per_node(plan, times.size(), "node times");
  if (workers < 1) throw Error(fmt::format("priority search: {} workers; at least one runs the plan", workers));
  if (!start.empty()) require_per_node(plan, start.size(), "priorities");
  if (plan.stream_of.empty()) return {};
  const auto started = std::chrono::steady_clock::now();
  const Replay replay(plan);
  // Two starting points, half the iterations each: the caller's priorities, and the critical path
  // in the measured times themselves (the caller's may come from other times: eager's, on more
  // intra-op threads). The first is what the result's speedup is measured against.
  NodeTimes mean(plan.stream_of.size(), 0);
  for (const NodeTimes& times : runs) {
    for (std::size_t k = 0; k < mean.size(); ++k) mean[k] += times[k] / static_cast<double>(runs.size());
  }
  std::vector<double> measured_path = plan_path_priorities(plan, mean);
  if (start.empty())
    return climb(replay, runs, std::move(measured_path), workers, options, options.iterations, started);
  PrioritySearch from_start = climb(replay, runs, std::move(start), workers, options, options.iterations / 2, started);
  PrioritySearch from_path = climb(replay, runs, std::move(measured_path), workers, options,
                                   options.iterations - options.iterations / 2, started);
  if (from_path.best_us < from_start.best_us) {
    from_start.best_us = from_path.best_us;
    from_start.priorities = std::move(from_path.priorities);
  }
  return from_start;
}

}  // namespace opara
