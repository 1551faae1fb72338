#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <vector>

namespace opara {

// Timing several runners on a machine whose speed drifts (a shared virtual machine, where the
// same run's time can change by half from one minute to the next): one long block per runner lets a slow
// minute land on one of them and decide the comparison. In rounds, each round times every runner
// in a short block, starting with a different runner each round, and ratios are taken within a
// round, where the machine was the same for all.

// Runs the runner `runs` times and returns each run's milliseconds (no runs: times nothing).
using BlockTimer = std::function<std::vector<double>(int runs)>;

struct RoundTimes {
  // samples[runner][round]: the milliseconds of that runner's block in that round.
  std::vector<std::vector<std::vector<double>>> samples;

  // Every sample of `runner`, all rounds together.
  [[nodiscard]] std::vector<double> all(std::size_t runner) const;
  // By round: the baseline's median over the runner's median, how many times faster it ran.
  [[nodiscard]] std::vector<double> speedups(std::size_t runner, std::size_t baseline) const;
  // The median of speedups(): drift between rounds cancels out.
  [[nodiscard]] double speedup(std::size_t runner, std::size_t baseline) const;
  // `more`'s rounds (the same runners timed again) after these.
  void append(const RoundTimes& more);
};

// How each block begins: `runs` untimed runs, and more until `at_least` has passed, so that a
// runner does not pay for the one before it. Cold caches take a run; the OpenMP threads of a
// runner with several intra-op threads spin for milliseconds after its last parallel region
// (libgomp's GOMP_SPINCOUNT) and take a core from the next runner's workers, which then times
// slower than it is.
struct Settle {
  int runs = 1;
  std::chrono::milliseconds at_least{0};
};

// Splits `runs` timed runs of each runner over `rounds` rounds (at most `runs` rounds, so none
// is empty; the first rounds take the remainder). `on_block` (optional) is told after each block
// how many timed runs it held.
RoundTimes time_in_rounds(const std::vector<BlockTimer>& runners, int rounds, int runs, const Settle& settle,
                          const std::function<void(int)>& on_block = {});

}  // namespace opara
