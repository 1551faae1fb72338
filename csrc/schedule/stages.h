#pragma once

// The planning stages on a prepared KernelDag, so make_plan() builds it once.

#include <vector>

#include "kernel_dag.h"
#include "opara/export.h"
#include "opara/schedule.h"

namespace opara {

StreamAssignment opara_streams(const KernelDag& dag, const std::vector<NodeId>& order, bool unhanded_rule);
// Nimble's first step alone (a minimum path cover of the transitive reduction, one chain a
// "stream"), exported for its tests; nimble_streams covers these chains again.
OPARA_API StreamAssignment nimble_chains(const KernelDag& dag, const std::vector<NodeId>& order);
StreamAssignment nimble_streams(const KernelDag& dag, const std::vector<NodeId>& order);
StreamAssignment allocate_streams(const KernelDag& dag, StreamPolicy policy, const std::vector<NodeId>& order);
void cap_streams(const Graph& graph, const KernelDag& dag, StreamAssignment& streams, int max_streams,
                 const std::vector<NodeId>& order, const std::vector<NodeCost>& costs);
EventPlan plan_events(const KernelDag& dag, const std::vector<int>& stream_of, const std::vector<NodeId>& order);

}  // namespace opara
