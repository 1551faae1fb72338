#pragma once

// Host steps that run on the CPU work on copies: their inputs are copied from the device and their
// results copied back, each value once, into memory of its own. Two values that alias on the
// device (a view and its base, an in-place result and its input) are then two buffers, which is
// right as long as nobody writes into them; these helpers keep every written alias group on one
// side of the copies.

#include <vector>

#include "opara/graph.h"
#include "opara/placement.h"
#include "overflow/segments.h"

namespace opara {

// A host step runs on the CPU when a placement sent one of its kernels there (kCpu and
// kLaunchesKernel); a view of a host node's result follows it to the CPU side without deciding.
bool step_runs_on_cpu(const Graph& graph, const Segment& segment, const std::vector<Placement>& placement);

// The CPU kernels of `cpu` (a mask, as placement_with_cpu_nodes takes it) that can run on copies.
// For each alias group a node writes in place (kWritesInput; values joined through that node and
// through nodes that launch no kernel), the copies are right when its writers are all on the
// device and no CPU step makes a value of it; or when they are all in one CPU step, which stages at
// most one value of the group from outside, and after which only values that step made are read
// (they are copied back after its writes). Where a group breaks, the CPU kernels that write it or
// make a value of it go back to the GPU (or, when there are none, every CPU kernel of the steps that
// touch it), until none breaks. `host` marks the kHost nodes.
std::vector<bool> cpu_nodes_safe_for_aliases(const Graph& graph, std::vector<bool> cpu, const std::vector<bool>& host);

// The placement that runs for a chosen one: its CPU kernels that are safe for aliases, `host` as
// the kHost nodes, every node that launches no kernel on its producer's side.
std::vector<Placement> runnable_placement(const Graph& graph, const std::vector<Placement>& chosen,
                                          const std::vector<bool>& host);

}  // namespace opara
