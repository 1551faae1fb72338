#pragma once

#include <c10/core/Device.h>

#include "opara/profile.h"

namespace opara {

// The occupancy limits of CUDA device `device`, from cudaGetDeviceProperties. Needs the GPU.
DeviceLimits device_limits(c10::DeviceIndex device);

}  // namespace opara
