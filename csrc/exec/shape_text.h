#pragma once

#include <c10/util/ArrayRef.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <string>

namespace opara {

// "[1, 3, 224, 224]": a tensor's sizes as errors name them.
inline std::string shape_text(c10::IntArrayRef sizes) {
  return fmt::format("[{}]", fmt::join(sizes, ", "));
}

}  // namespace opara
