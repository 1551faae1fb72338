#pragma once

#include <c10/core/Device.h>

#include <cstddef>

namespace opara {

// Bytes the caching allocator has handed out on `device` now, at most since the last
// resetPeakStats, and holds from the driver now.
std::size_t allocated_bytes(c10::DeviceIndex device);
std::size_t peak_allocated_bytes(c10::DeviceIndex device);
std::size_t reserved_bytes(c10::DeviceIndex device);

}  // namespace opara
