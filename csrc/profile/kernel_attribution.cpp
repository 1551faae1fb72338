// Which node launched which kernel. The profiler pushes a node's id as CUPTI external correlation
// id around the node's run; every CUDA API call made meanwhile gets an EXTERNAL_CORRELATION record
// pairing the call's correlation id with the node id, and the kernels and copies the call started
// carry the same correlation id:
//
//   external correlation {correlation 41 -> node 7}   kernel "relu" {correlation 41}  => node 7
//
// A copy's record names the driver call that started it, and the runtime call behind that as well:
// either may carry the pair. A kernel whose correlation id no record names ran outside every node (or CUPTI lost the
// pair); a node expected to do device work with nothing joined to it is silent. Both are reported, never guessed at.
#include <unordered_map>

#include "opara/profile.h"
#include "profile/kernel_attribution.h"
#include "support/internal_assert.h"

namespace opara {
namespace {

// correlation id -> node id, for ids inside the graph.
std::unordered_map<std::uint32_t, NodeId> nodes_by_correlation(const std::vector<ExternalCorrelation>& correlations,
                                                               std::size_t node_count) {
  std::unordered_map<std::uint32_t, NodeId> nodes;
  for (const ExternalCorrelation& pair : correlations) {
    if (pair.external_id >= node_count) continue;  // not one of ours: left unattributed
    const auto node = static_cast<NodeId>(pair.external_id);
    const auto [entry, inserted] = nodes.emplace(pair.correlation_id, node);
    OPARA_ASSERT(inserted || entry->second == node, "CUDA API call {} is correlated with node {} and node {}",
                 pair.correlation_id, entry->second, node);
  }
  return nodes;
}

}  // namespace

Attribution attribute_activities(const ActivityRecords& records, std::size_t node_count,
                                 const std::vector<bool>& expects_device_work) {
  OPARA_ASSERT(expects_device_work.empty() || expects_device_work.size() == node_count,
               "device work expectations for {} nodes, {} nodes profiled", expects_device_work.size(), node_count);
  const auto nodes = nodes_by_correlation(records.correlations, node_count);
  Attribution attribution;
  attribution.kernels.resize(node_count);
  attribution.copies.resize(node_count);
  for (const KernelRecord& kernel : records.kernels) {
    const auto found = nodes.find(kernel.correlation_id);
    if (found == nodes.end()) {
      attribution.unattributed_kernels.push_back(kernel);
    } else {
      attribution.kernels[found->second].push_back(kernel);
    }
  }
  for (const CopyRecord& copy : records.copies) {
    auto found = nodes.find(copy.correlation_id);
    if (found == nodes.end() && copy.runtime_correlation_id != 0) found = nodes.find(copy.runtime_correlation_id);
    if (found == nodes.end()) {
      attribution.unattributed_copies.push_back(copy);
    } else {
      attribution.copies[found->second].push_back(copy);
    }
  }
  for (std::size_t id = 0; id < expects_device_work.size(); ++id) {
    if (expects_device_work[id] && attribution.kernels[id].empty() && attribution.copies[id].empty()) {
      attribution.silent_nodes.push_back(static_cast<NodeId>(id));
    }
  }
  return attribution;
}

}  // namespace opara
