#pragma once

// CompiledStats as the extension hands it to Python: every number of to_json(CompiledStats), by
// name, and `keep_alive` (1 when the graphs were captured with MemoryProtection::kKeepAlive)
// for its `memory`, which is text.

#include <ATen/core/Dict.h>

#include <nlohmann/json.hpp>

#include <string>

#include "opara/options.h"

namespace opara::ext {

inline c10::Dict<std::string, double> stats_dict(const CompiledStats& stats) {
  c10::Dict<std::string, double> dict;
  const nlohmann::json json = nlohmann::json::parse(to_json(stats));  // items() only refers to it
  for (const auto& [key, value] : json.items()) {
    if (value.is_number()) dict.insert(key, value.get<double>());
  }
  dict.insert("keep_alive", stats.memory == MemoryProtection::kKeepAlive ? 1 : 0);
  return dict;
}

}  // namespace opara::ext
