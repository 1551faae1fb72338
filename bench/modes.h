#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <algorithm>

#include <string>
#include <string_view>
#include <vector>

#include "opara/error.h"
#include "opara/plan.h"

namespace opara::bench {

// An execution mode of `run` and `trace`: eager node by node, or a Plan executed by streams.
struct ModeSpec {
  std::string_view name;
  bool planned;
  PlanOptions plan;
};
inline constexpr ModeSpec kModes[] = {
    {"eager", false, {}},
    {"sequential", true, {StreamPolicy::kSingle, OrderPolicy::kTopological, 0}},
    {"nimble", true, {StreamPolicy::kNimble, OrderPolicy::kTopological, 0}},
    {"opara", true, {StreamPolicy::kOpara, OrderPolicy::kOpara, 0}},
    {"opara-noreorder", true, {StreamPolicy::kOpara, OrderPolicy::kTopological, 0}},  // Alg. 1 without Alg. 2
    // The peers' automatic schedulers, each with its own order (torchsched keeps Inductor's, the
    // program's) and stream count (schedule/trtllm_streams.cpp, torchsched_streams.cpp).
    {"trtllm", true, {StreamPolicy::kTrtllm, OrderPolicy::kTrtllm, 0}},
    {"torchsched", true, {StreamPolicy::kTorchsched, OrderPolicy::kTopological, 0}},
};

// `run --device cuda` only: opara with CPU overflow (compile()'s Options::overflow, chosen by
// --overflow). On the CPU every node runs on the CPU already.
inline constexpr std::string_view kOverflowMode = "opara+overflow";

inline const ModeSpec& mode_spec(const std::string& name) {
  std::vector<std::string_view> names;
  for (const ModeSpec& mode : kModes) {
    if (mode.name == name) return mode;
    names.push_back(mode.name);
  }
  throw Error(fmt::format("mode '{}' is not available; available: {}", name, fmt::join(names, ", ")));
}

// A mode listed twice would be timed twice and shown as two rows: a usage error.
inline void reject_repeated_modes(const std::vector<std::string>& modes) {
  for (auto mode = modes.begin(); mode != modes.end(); ++mode) {
    if (std::find(modes.begin(), mode, *mode) != mode) {
      throw CLI::ValidationError("--modes", fmt::format("lists {} twice", *mode));
    }
  }
}

}  // namespace opara::bench
