#pragma once

// CPU-overflow placement: which nodes run on the GPU (inside the CUDA graphs), which move to the
// CPU because they are cheap there and costly to wait for on the GPU (SIR+ Comm+SD), and which
// must run on the host because they cannot be captured. Plain data and pure functions: the
// algorithms see a Graph and PlacementCosts only, so they run on hand-made graphs and on any
// machine; placement_costs() fills the costs from a recorded Profile. compile() executes a
// placement (Options::overflow): host steps with pinned copies on host threads, see
// csrc/runtime/README.md. Internal: a user chooses a policy through Options::overflow.

#include <limits>
#include <string>
#include <vector>

#include "opara/graph.h"
#include "opara/placement.h"
#include "opara/plan.h"
#include "opara/profile.h"

namespace opara {

// What the placement algorithms know of a model. Times of a node that cannot run on a device are
// +infinity (kUnknownUs): such a node never moves there.
struct PlacementCosts {
  std::vector<double> gpu_us;       // by node: its kernels' time on the GPU
  std::vector<double> cpu_us;       // by node: its time on the CPU, on CPU copies of its inputs
  std::vector<double> value_bytes;  // by value: bytes a copy of it to the other side moves (0: none)
  double h2d_bytes_per_s = 0;       // pinned copies; 0: unknown, every copy then costs nothing
  double d2h_bytes_per_s = 0;
  double alpha_us = kDefaultAlphaUs;
  // Splitting a graph in two around a host step costs one more graph launch (host -> GPU) and one
  // synchronisation (GPU -> host).
  double graph_launch_us = kDefaultGraphLaunchUs;
  double sync_us = kDefaultSyncUs;

  static constexpr double kUnknownUs = std::numeric_limits<double>::infinity();

  // Microseconds to copy `bytes` host-to-device and device-to-host.
  [[nodiscard]] double h2d_us(double bytes) const;
  [[nodiscard]] double d2h_us(double bytes) const;
  [[nodiscard]] double split_us() const { return graph_launch_us + sync_us; }
};

// Costs from a full profile of `graph` (gpu_ns, cpu_ns, copy bandwidths). Per-value bytes come
// from `shapes` (record_shapes on the example inputs) where given, else from the profile: a
// node's bytes_out split evenly over its outputs, model inputs from the profile's input shapes.
// A node that launches a kernel but has no measured CPU time never moves (cpu_us unknown).
// Throws opara::Error when the profile has another node count, or shapes are given for another.
PlacementCosts placement_costs(const Graph& graph, const Profile& profile, const std::vector<NodeShapes>& shapes = {},
                               double alpha_us = kDefaultAlphaUs);

// ---- the placements ---------------------------------------------------------------------------

// Everything on the GPU but the nodes flagged kNotCapturable, which are kHost.
std::vector<Placement> gpu_placement(const Graph& graph);

// Per node: true when it runs in a host step (kCpu or kHost), for split_segments.
std::vector<bool> host_mask(const std::vector<Placement>& placement);

// The placement's CPU side: kCpu for `cpu` nodes, kHost for kNotCapturable ones (whatever `cpu`
// says), kGpu otherwise; then each node that launches no kernel (a view, a list construct) takes
// the side of the producer of its first input, since it only renames memory that lives there.
std::vector<Placement> placement_with_cpu_nodes(const Graph& graph, const std::vector<bool>& cpu);
// The same with the kHost nodes given: `host` rather than the flagged ones (compile() keeps an
// op-table synchronisation that reads no GPU tensor in the graphs, and adds nodes that failed capture).
std::vector<Placement> placement_with_cpu_nodes(const Graph& graph, const std::vector<bool>& cpu,
                                                const std::vector<bool>& host);

struct CommSdOptions {
  int max_iterations = 32;  // passes over the graph before giving up on a fixed point
  // For the makespan estimate that confirms moves.
  int gpu_streams = 4;
  int host_threads = 2;
  bool confirm_by_estimate = true;  // false: SIR+ Alg. 1 alone
};

struct PlacementReport {
  std::vector<Placement> placement;  // by node
  double none_us = 0;                // estimated makespan of gpu_placement()
  double chosen_us = 0;              // estimated makespan of `placement`
  std::vector<NodeId> rule_moves;    // nodes on the CPU by the rule's fixed point (views included)
  std::vector<NodeId> moved;         // nodes on the CPU in `placement` (kCpu)
  int moves_tried = 0;               // groups of connected rule moves tried against the estimate
  int moves_kept = 0;
  int iterations = 0;      // passes of the rule's loop
  bool converged = false;  // the last pass changed nothing (false: stopped by max_iterations)
};

// SIR+ Alg. 1 (Comm+SD). A node is on the CPU when
//     cpu_us + transfers < gpu_us + alpha_us,
// transfers being the copies its CPU placement needs: each input made on the GPU side (or a
// model input) copied device-to-host, each output read on the GPU side (or returned by the model)
// copied host-to-device, at the measured bandwidths. Starting from SD (every node with cpu_us <
// gpu_us + alpha on the CPU), passes in topological order send back to the GPU each CPU node that
// fails the rule, until a pass changes nothing or `max_iterations` passes. kHost nodes stay and
// count as CPU side; nodes that launch no kernel follow their producer. Then, unless
// `confirm_by_estimate` is off, each connected group of moves is kept only if it lowers
// estimate_makespan. Throws opara::Error when the costs are not of this graph.
PlacementReport comm_sd_placement(const Graph& graph, const PlacementCosts& costs, const CommSdOptions& options = {});

// An EST/EFT list-scheduling estimate of one run, in microseconds. Nodes in id (topological)
// order each start at the earliest time their inputs are there and one of `gpu_streams` GPU
// streams (kGpu) or `host_threads` host threads (kCpu, kHost) is free, and take gpu_us or cpu_us
// (a kHost node without a CPU time takes its GPU time); nodes that launch no kernel take no time
// and no resource. A value read on the other side is copied once, on one copy engine per
// direction, and reaches the other side sync_us (to the host) or graph_launch_us (to the GPU)
// after its copy ends: the cost of splitting the graph there. Model inputs start on the GPU and
// model outputs must end there. Kernel contention between streams is not modelled.
double estimate_makespan(const Graph& graph, const std::vector<Placement>& placement, const PlacementCosts& costs,
                         int gpu_streams, int host_threads);

// kCpu for the nodes named by id ("12") or kind ("aten::nms": every node of that kind), as
// placement_with_cpu_nodes. Throws opara::Error naming every unknown name and what is accepted.
std::vector<Placement> manual_placement(const Graph& graph, const std::vector<std::string>& names);
// The same from a JSON file {"cpu": [12, "aten::nms", ...]}; throws opara::Error naming the file
// when it cannot be read or has another form.
std::vector<Placement> manual_placement_file(const Graph& graph, const std::string& path);

}  // namespace opara
