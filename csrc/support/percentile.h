#pragma once

#include <algorithm>
#include <limits>
#include <vector>

namespace opara {

// The sample at `fraction` (0.5: the median) of the sorted samples, nearest rank; NaN for none.
inline double percentile(std::vector<double> samples, double fraction) {
  if (samples.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(samples.begin(), samples.end());
  const auto index = static_cast<std::size_t>(fraction * static_cast<double>(samples.size() - 1) + 0.5);
  return samples[std::min(index, samples.size() - 1)];
}

}  // namespace opara
