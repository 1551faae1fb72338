#pragma once

#include <chrono>

namespace opara {

// Milliseconds from `start` to now, on the steady clock.
inline double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace opara
