#pragma once

// CompiledStats as the extension hands it to Python: numeric_stats(), a Dict(str, float).

#include <ATen/core/Dict.h>

#include <string>

#include "opara/options.h"

namespace opara::ext {

inline c10::Dict<std::string, double> stats_dict(const CompiledStats& stats) {
  c10::Dict<std::string, double> dict;
  for (const auto& [name, value] : numeric_stats(stats)) dict.insert(name, value);
  return dict;
}

}  // namespace opara::ext
