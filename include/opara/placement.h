#pragma once

// CPU overflow, as a user chooses it (Options::overflow): which side a node runs on and the
// policies that place them. The algorithms themselves (SIR+ Comm+SD, the makespan estimate, manual
// placement) are internal: csrc/overflow/placements.h.

#include <cstdint>
#include <string_view>

#include "opara/export.h"

namespace opara {

enum class Placement : std::uint8_t {
  kGpu,   // captured in a CUDA graph segment
  kCpu,   // moved to the CPU by a placement policy: runs in a host step, on CPU copies of its inputs
  kHost,  // cannot be captured (host synchronisation, data-dependent shapes): always a host step
};

OPARA_API std::string_view to_string(Placement placement);

// How compile() and `opara-bench plan --overflow` choose the placement.
enum class OverflowPolicy : std::uint8_t {
  kNone,    // everything on the GPU except the nodes that cannot be captured
  kCommSd,  // SIR+ Alg. 1 (Comm+SD), each move kept only when the makespan estimate improves
  kManual,  // the nodes the user names
};

OPARA_API std::string_view to_string(OverflowPolicy policy);
// "none", "comm_sd" or "manual"; throws opara::Error listing those for anything else.
OPARA_API OverflowPolicy parse_overflow_policy(std::string_view name);

// SIR+'s threshold for switching to the slower device: GPU launch overheads are 10-100 us.
inline constexpr double kDefaultAlphaUs = 100;
// A CUDA graph launch and a host wait on an event, roughly, on current GPUs; not measured yet.
inline constexpr double kDefaultGraphLaunchUs = 5;
inline constexpr double kDefaultSyncUs = 10;

}  // namespace opara
