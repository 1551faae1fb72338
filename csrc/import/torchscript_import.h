#pragma once

#include <memory>
#include <string>

#include "opara/graph.h"

namespace opara {

// Reads a TorchScript archive (.pt): load, freeze (without numerics-changing optimisations),
// inline, then one Graph node per remaining operation with constants folded into its op.
// Ordering edges come from LibTorch's alias analysis. Throws opara::Error naming the file and
// node for constructs it cannot execute (control flow that survived freezing, unknown ops).
Graph import_torchscript(const std::string& path);
// The same for an archive in memory; `name` stands for the file.
Graph import_torchscript_bytes(std::shared_ptr<const std::string> archive, const std::string& name);

}  // namespace opara
