#pragma once

#include <string>

#include "opara/export.h"

namespace opara {

// Which opara this is, the LibTorch release it was compiled against and the one this process
// runs. LibTorch has no stable ABI between releases: the two should be the same release
// (opara builds against torch 2.11 to 2.15; the Python package and the installed CMake package
// refuse a mismatch before loading or linking).
struct VersionInfo {
  std::string opara;          // "0.1.0"
  std::string torch_built;    // "2.15.0": TORCH_VERSION when libopara was compiled
  std::string torch_running;  // "2.15.0": what the loaded LibTorch says of itself ("unknown" if it does not)
};

OPARA_API VersionInfo version();

// "opara 0.1.0, built against torch 2.15.0, running torch 2.15.0".
OPARA_API std::string to_string(const VersionInfo& version);

}  // namespace opara
