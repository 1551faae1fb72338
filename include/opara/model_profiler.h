#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "opara/error.h"
#include "opara/export.h"
#include "opara/graph.h"
#include "opara/plan.h"
#include "opara/profile.h"

namespace opara {

// CUPTI cannot be used here: not installed, not permitted, or already taken by another tool (the
// PyTorch profiler, Nsight). The message says which.
class OPARA_API CuptiUnavailable : public Error {
 public:
  using Error::Error;
};

struct ProfilerOptions {
  int runs = 5;       // profiled runs; each node's GPU time is the median over them
  int warmup = 3;     // plain eager runs first (library handles, workspaces, the allocator's pool); 1 at least
  int host_runs = 3;  // CPU runs for the host times
  bool measure_copy_bandwidth = true;
  // Throw CuptiUnavailable instead of falling back to the static estimate (noted in the profile).
  bool require_cupti = false;
  // Called after every whole run of the model (host, warm-up, plain and profiled runs:
  // ModelProfiler::total_runs() in all), for a progress bar.
  std::function<void()> after_run;
};

// Profiles a model on one CUDA GPU: runs it op by op on the current stream with CUPTI recording
// every kernel, memcpy and memset, each node's id pushed as external correlation id around its
// run; joins the records to the nodes, turns each node's kernels into a resource demand
// (kernel_demand), and adds host times and bytes (measure_host_costs), the op classes refined by
// measurement, and the pinned copy bandwidths. Example:
//
//   ModelProfiler profiler(load("googlenet_b1.pt"), c10::Device(c10::kCUDA, 0));
//   save_profile(profiler.profile(inputs), "googlenet.profile.json");
//
// Without CUPTI the profile's demands are the static estimate, and its `demand_source` and
// `notes` say so. Not thread-safe: one profile at a time per process (CUPTI has one subscriber).
class OPARA_API ModelProfiler {
 public:
  // Throws opara::Error when `device` is not a CUDA device or no GPU is visible.
  ModelProfiler(const Graph& graph, c10::Device device, ProfilerOptions options = {});

  // Throws opara::Error for wrong inputs or a failing node (named), and when CUPTI dropped records.
  Profile profile(const std::vector<at::Tensor>& inputs) const;

  // How many times profile() runs the model, host runs included.
  int total_runs() const;

 private:
  Graph graph_;
  c10::Device device_;
  ProfilerOptions options_;
};

// ---- the costs that plan a model -------------------------------------------------

// The costs Alg. 2 orders a model's launches by, and where they came from.
struct ModelCosts {
  std::vector<NodeCost> costs;
  std::string source;  // "profile", "shapes" (recorded on the examples) or "none" (the op table alone)
  // By node id, what one run of the examples recorded (empty without examples): what the CUDA
  // pool estimate reads, whichever source the costs came from.
  std::vector<NodeShapes> shapes;

  // What a stream must pay for on a GPU in these costs' units (PlanOptions::payoff): only bytes
  // from shapes have units it is known in.
  [[nodiscard]] StreamPayoff gpu_payoff() const { return source == "shapes" ? kShapeCostPayoff : StreamPayoff{}; }
};

// From the recorded profile when one is given; else estimated from the shapes one eager run of
// `examples` records on `device` (default: the CPU; inputs the model writes in place are copied
// first, so the caller's keep their values), a run made with a profile too; else, without
// examples, from the op table alone.
// `device`: the one the model will run on; a CUDA device's GPU must be the profile's.
OPARA_API ModelCosts model_costs(const Graph& graph, const std::vector<at::Tensor>& examples,
                                 const CostOptions& options = {}, std::optional<c10::Device> device = std::nullopt);

}  // namespace opara
