// An EST/EFT list-scheduling estimate of one run under a placement (HEFT's earliest start and
// finish times, with Chrion's transfer term), for comm_sd_placement to confirm its moves with.
//
// Nodes are taken in id (topological) order. Each starts at the earliest time its inputs are on
// its side and a unit of its side is free, and finishes its time later. Example, one stream and
// one thread, x on the GPU, b on the CPU, 1 MB values at 1 GB/s (1000 us), sync 10, launch 5:
//
//   x -> a -> b -> c        a: GPU 0..100; a's output copied 100..1100, on the host at 1110;
//                           b: CPU 1110..1130; copied back 1130..2130, on the GPU at 2135;
//                           c: GPU 2135..2235 = the makespan.
//
// A copy is made once per value and direction, on the copy engine of that direction, as soon as
// the value exists and the engine is free (when its first reader on the other side is placed).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "opara/error.h"
#include "opara/placement.h"
#include "overflow/placements.h"
#include "overflow/sides.h"

namespace opara {
namespace {

constexpr double kNotYet = -1;

class MakespanEstimate {
 public:
  MakespanEstimate(const Graph& graph, const std::vector<Placement>& placement, const PlacementCosts& costs,
                   int gpu_streams, int host_threads)
      : graph_(graph),
        placement_(placement),
        costs_(costs),
        gpu_free_(static_cast<std::size_t>(std::max(1, gpu_streams)), 0.0),
        host_free_(static_cast<std::size_t>(std::max(1, host_threads)), 0.0),
        on_gpu_(graph.values().size(), kNotYet),
        on_host_(graph.values().size(), kNotYet),
        finish_(graph.size(), 0.0) {
    for (ValueId input : graph.inputs()) on_gpu_[input] = 0;
  }

  double run() {
    double makespan = 0;
    for (const Node& node : graph_.nodes()) makespan = std::max(makespan, place(node));
    for (ValueId output : graph_.outputs()) makespan = std::max(makespan, arrival(output, /*cpu_side=*/false));
    return makespan;
  }

 private:
  // When `value` is there to read on the given side, copying it over if it lives on the other.
  double arrival(ValueId value, bool cpu_side) {
    std::vector<double>& here = cpu_side ? on_host_ : on_gpu_;
    if (here[value] != kNotYet) return here[value];
    const std::vector<double>& there = cpu_side ? on_gpu_ : on_host_;
    const double bytes = costs_.value_bytes[value];
    double& engine = cpu_side ? d2h_free_ : h2d_free_;
    const double start = std::max(there[value], engine);
    engine = start + (cpu_side ? costs_.d2h_us(bytes) : costs_.h2d_us(bytes));
    // The reader waits for the copy and for the host to learn of it (sync) or for the next graph
    // to be launched: the cost of the split between them.
    here[value] = engine + (cpu_side ? costs_.sync_us : costs_.graph_launch_us);
    return here[value];
  }

  double duration(const Node& node) const {
    if (!node.has(kLaunchesKernel)) return 0;
    switch (placement_[node.id]) {
      case Placement::kGpu: return costs_.gpu_us[node.id];
      case Placement::kCpu: return costs_.cpu_us[node.id];
      case Placement::kHost:
        return std::isfinite(costs_.cpu_us[node.id]) ? costs_.cpu_us[node.id] : costs_.gpu_us[node.id];
    }
    return 0;
  }

  // Places `node` at its earliest start and returns its finish.
  double place(const Node& node) {
    const bool cpu_side = overflow::on_cpu_side(placement_[node.id]);
    double ready = 0;
    for (ValueId input : node.inputs) ready = std::max(ready, arrival(input, cpu_side));
    for (NodeId predecessor : node.predecessors) {  // ordering edges carry no value, only the wait
      const bool crosses = overflow::on_cpu_side(placement_[predecessor]) != cpu_side;
      const double wait = crosses ? (cpu_side ? costs_.sync_us : costs_.graph_launch_us) : 0;
      ready = std::max(ready, finish_[predecessor] + wait);
    }
    const double time = duration(node);
    double finish = ready;
    if (time > 0) {  // a node without work takes no stream or thread
      std::vector<double>& units = cpu_side ? host_free_ : gpu_free_;
      auto unit = std::min_element(units.begin(), units.end());
      finish = std::max(ready, *unit) + time;
      *unit = finish;
    }
    finish_[node.id] = finish;
    for (ValueId output : node.outputs) (cpu_side ? on_host_ : on_gpu_)[output] = finish;
    return finish;
  }

  const Graph& graph_;
  const std::vector<Placement>& placement_;
  const PlacementCosts& costs_;
  std::vector<double> gpu_free_;   // when each GPU stream is next free
  std::vector<double> host_free_;  // when each host thread is next free
  double h2d_free_ = 0;            // the copy engines
  double d2h_free_ = 0;
  std::vector<double> on_gpu_;  // by value: when it is readable on the GPU (kNotYet: not there)
  std::vector<double> on_host_;
  std::vector<double> finish_;  // by node
};

}  // namespace

double estimate_makespan(const Graph& graph, const std::vector<Placement>& placement, const PlacementCosts& costs,
                         int gpu_streams, int host_threads) {
  overflow::check_sizes(graph, costs, &placement);
  if (gpu_streams < 1 || host_threads < 1) {
    throw Error(fmt::format("estimate_makespan needs at least one GPU stream and one host thread, not {} and {}",
                            gpu_streams, host_threads));
  }
  return MakespanEstimate(graph, placement, costs, gpu_streams, host_threads).run();
}

}  // namespace opara
