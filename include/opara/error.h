#pragma once

#include <stdexcept>
#include <string>

#include "opara/export.h"

namespace opara {

// A user-facing error: a bad model file, an unsupported construct, a wrong input. The message
// names the file, the node (kind and source location where known) and what to do about it.
// Bugs in opara itself are internal asserts, never this type.
class OPARA_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace opara
