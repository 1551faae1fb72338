#pragma once

// Regions: a plan's kernel nodes grouped into units that another compiler (Inductor) may fuse and
// the runtime may schedule like nodes. A region is a run of consecutive nodes of one stream (in
// launch order) with cross-stream dependencies only at its edges: only its first node depends on
// another stream, only its last node has dependants on another stream. Example, a fork:
//
//      a(s0) -> b(s0) -> c(s0)        regions {a}, {b, c}, {d, e}: a ends its region (d, on s1,
//        \                            depends on it), and b, c stay together; merged further when
//         d(s1) -> e(s1)              {d, e} is too small to be worth running beside {b, c}.
//
// Cut so, the regions form a DAG (a path leaving a region and coming back would have to enter at
// its first node after leaving past it, against launch order, which is topological). Small ones
// are then merged into a neighbour where what could run beside them is far larger (min_share): the
// parallelism they offer cannot pay for the fusion and the launch they cost. A merged node takes
// its region's stream; regions keep their nodes contiguous in the new launch order, ranked by their
// first node's old launch position.
//
// Kernel-free nodes (views, size queries, lists) belong to no region (kNoRegion): whoever
// compiles regions recomputes them where they are used. A write of state in place (a KV cache's
// new row, a counter) is in a region like any kernel node: the compiled region writes the state
// where it lives (Inductor reinplaces the write of its input), as Inductor's own graph of the
// whole step does, so that a decode step is not cut at each layer's cache write.

#include <vector>

#include "opara/plan.h"
#include "schedule/kernel_dag.h"

namespace opara {

// Cuts `plan` into regions, merges the small ones (a region is small when its cost, the sum of its
// nodes' demands or its node count without costs, is below `min_share` of the largest region that
// can run beside it; one that nothing runs beside always is), and writes plan.region_of and
// plan.region_count. Merges change plan.stream_of (compacted, numbered by first launch) and
// plan.launch_order; the caller plans the events again.
// Past kMergeLimit regions the cut ones are kept as they are (merging rebuilds the region DAG's
// reachability after each merge).
void form_regions(const Graph& graph, const KernelDag& dag, const std::vector<NodeCost>& costs, double min_share,
                  Plan& plan);

inline constexpr int kMergeLimit = 2048;

}  // namespace opara
