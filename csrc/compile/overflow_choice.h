#pragma once

// Which nodes of a model compile() runs on the CPU, by OverflowOptions::policy: none, the nodes the
// user names, or SIR+ Comm+SD on the times of a full profile.

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

#include "opara/options.h"
#include "opara/placement.h"
#include "overflow/placements.h"

namespace opara {

struct OverflowChoice {
  std::vector<Placement> placement;  // by node
  // Comm+SD's estimates of one run, in microseconds: all on the GPU, and `placement`.
  std::optional<double> predicted_none_us;
  std::optional<double> predicted_us;
  // Comm+SD: the costs it weighed and the estimate's resources, to estimate the placement that
  // finally runs (after nodes go back for aliasing or capture).
  std::optional<PlacementCosts> costs;
  CommSdOptions comm_sd;
};

// kNone: gpu_placement. kManual: options.cpu_nodes, node ids and kinds, or a single .json file
// (manual_placement_file). kCommSd: comm_sd_placement on placement_costs of the full profile at
// `profile` (per-value bytes from shapes recorded on `examples`, on the CPU), confirmed by
// the estimate with `gpu_streams` streams. Throws opara::Error naming the file and what to do when
// manual names no node or an unknown one, or comm_sd has no profile or one without times.
// Comm+SD's costs from the full profile at `profile`: times from it, per-value bytes from shapes
// recorded on `examples` (on the CPU; the profile's sizes when that fails, with a warning). Throws
// opara::Error naming the file when it cannot be read or holds no times.
PlacementCosts profile_placement_costs(const Graph& graph, const std::vector<at::Tensor>& examples,
                                       const std::string& profile, double alpha_us);

OverflowChoice choose_placement(const Graph& graph, const std::vector<at::Tensor>& examples,
                                const OverflowOptions& options, const std::string& profile, int gpu_streams);

}  // namespace opara
