#pragma once

#include <string>

#include "opara/export.h"
#include "opara/graph.h"

namespace opara {

enum class ModelFormat { kTorchScript, kExportedProgram };

// Tells the two archive formats apart by content. Throws opara::Error like load() for a file
// that is neither.
OPARA_API ModelFormat detect_format(const std::string& path);

// Reads a model file into its operator Graph: a TorchScript archive (torch.jit.save, usually
// .pt) or a torch.export archive (torch.export.save, usually .pt2), told apart by content.
// Throws opara::Error naming the file, the node and what to do when the file is missing, not a
// model, damaged, or holds something opara cannot execute.
OPARA_API Graph load(const std::string& path);

// Reads a torch.export archive held in memory (the bytes torch.export.save writes to a buffer),
// as load() reads a .pt2 file, so that a program made in the same process (a torch.compile graph)
// needs no file. `name` stands for the file in errors and becomes Graph::source_path.
OPARA_API Graph load_exported_program(std::string archive, const std::string& name);

// Reads a model archive of either format held in memory (what torch.jit.save or torch.export.save
// write to a buffer), told apart by content as load() tells files: a module compiled from Python
// needs no file. `name` (the module, say) stands for the file in errors and becomes
// Graph::source_path.
OPARA_API Graph load_archive(std::string archive, const std::string& name);

}  // namespace opara
