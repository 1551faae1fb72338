#include "runtime/cuda/device_memory.h"

#include <c10/cuda/CUDACachingAllocator.h>

namespace opara {

std::size_t allocated_bytes(c10::DeviceIndex device) {
  return static_cast<std::size_t>(c10::cuda::CUDACachingAllocator::getDeviceStats(device).allocated_bytes[0].current);
}

std::size_t peak_allocated_bytes(c10::DeviceIndex device) {
  return static_cast<std::size_t>(c10::cuda::CUDACachingAllocator::getDeviceStats(device).allocated_bytes[0].peak);
}

std::size_t reserved_bytes(c10::DeviceIndex device) {
  return static_cast<std::size_t>(c10::cuda::CUDACachingAllocator::getDeviceStats(device).reserved_bytes[0].current);
}

}  // namespace opara
