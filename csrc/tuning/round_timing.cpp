#include "tuning/round_timing.h"

#include <algorithm>

#include "support/percentile.h"

namespace opara {

std::vector<double> RoundTimes::all(std::size_t runner) const {
  std::vector<double> joined;
  for (const auto& block : samples[runner]) joined.insert(joined.end(), block.begin(), block.end());
  return joined;
}

std::vector<double> RoundTimes::speedups(std::size_t runner, std::size_t baseline) const {
  std::vector<double> ratios;
  for (std::size_t round = 0; round < samples[runner].size(); ++round) {
    const auto& mine = samples[runner][round];
    const auto& theirs = samples[baseline][round];
    if (mine.empty() || theirs.empty()) continue;
    ratios.push_back(percentile(theirs, 0.5) / percentile(mine, 0.5));
  }
  return ratios;
}

double RoundTimes::speedup(std::size_t runner, std::size_t baseline) const {
  return percentile(speedups(runner, baseline), 0.5);
}

void RoundTimes::append(const RoundTimes& more) {
  samples.resize(std::max(samples.size(), more.samples.size()));
  for (std::size_t runner = 0; runner < more.samples.size(); ++runner) {
    samples[runner].insert(samples[runner].end(), more.samples[runner].begin(), more.samples[runner].end());
  }
}

RoundTimes time_in_rounds(const std::vector<BlockTimer>& runners, int rounds, int runs, const Settle& settle,
                          const std::function<void(int)>& on_block) {
  rounds = std::max(1, std::min(rounds, runs));  // every round times each runner at least once
  RoundTimes times;
  times.samples.assign(runners.size(), std::vector<std::vector<double>>(static_cast<std::size_t>(rounds)));
  for (int round = 0; round < rounds; ++round) {
    const int block = runs / rounds + (round < runs % rounds ? 1 : 0);
    for (std::size_t k = 0; k < runners.size(); ++k) {
      const std::size_t runner = (k + static_cast<std::size_t>(round)) % runners.size();  // rotate who goes first
      const auto settled = std::chrono::steady_clock::now() + settle.at_least;
      runners[runner](settle.runs);
      while (std::chrono::steady_clock::now() < settled) runners[runner](1);
      times.samples[runner][static_cast<std::size_t>(round)] = runners[runner](block);
      if (on_block) on_block(block);
    }
  }
  return times;
}

}  // namespace opara
