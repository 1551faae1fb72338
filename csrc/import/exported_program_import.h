#pragma once

#include <memory>
#include <string>

#include "opara/graph.h"

namespace opara {

// Reads a torch.export archive (.pt2, written by torch.export.save): the serialized
// ExportedProgram (LibTorch's own schema types, torch/csrc/utils/generated_serialization_types.h)
// and its weights, through LibTorch's zip reader. One Graph node per FX call, executed through
// the dispatcher; parameters, buffers and constants are folded in. Ordering edges come from the
// schemas' alias annotations: the exported graph keeps in-place ops (relu_, add_, copy_).
Graph import_exported_program(const std::string& path);
// The same for an archive in memory; `name` stands for the file.
Graph import_exported_program_bytes(std::shared_ptr<const std::string> archive, const std::string& name);

}  // namespace opara
