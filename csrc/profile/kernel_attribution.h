#pragma once

// Joining CUPTI's activity records to the nodes that launched them: the model profiler's
// internals (csrc/profiler), not part of the public API.

#include <cstdint>
#include <vector>

#include "opara/profile.h"

namespace opara {

// CUPTI's EXTERNAL_CORRELATION record: the API call `correlation_id` was made while the profiler
// had pushed `external_id` (a node id) on the calling thread.
struct ExternalCorrelation {
  std::uint32_t correlation_id = 0;
  std::uint64_t external_id = 0;
};

// What one flush of the activity buffers holds.
struct ActivityRecords {
  std::vector<KernelRecord> kernels;
  std::vector<CopyRecord> copies;
  std::vector<ExternalCorrelation> correlations;
};

// Each node's device work, joined through the external correlation: a kernel's correlation id
// names the launching API call, whose external correlation record names the node.
struct Attribution {
  std::vector<std::vector<KernelRecord>> kernels;  // by node id
  std::vector<std::vector<CopyRecord>> copies;     // by node id
  std::vector<KernelRecord> unattributed_kernels;  // launched outside every node, or by an unknown id
  std::vector<CopyRecord> unattributed_copies;
  // Nodes expected to do device work (see `expects_device_work`) with no kernel and no copy.
  std::vector<NodeId> silent_nodes;
};

// Joins `records` to the nodes 0 .. node_count-1. `expects_device_work` (by node id, empty: none
// expected) says which nodes must show some kernel or copy. Throws opara::InternalError (a bug in
// opara) when one API call is correlated with two nodes, since the profiler pushes exactly one id
// around each node, or when `expects_device_work` is neither empty nor one flag per node.
Attribution attribute_activities(const ActivityRecords& records, std::size_t node_count,
                                 const std::vector<bool>& expects_device_work = {});

}  // namespace opara
