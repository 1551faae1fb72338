#pragma once

#include <c10/core/Device.h>

#include "opara/export.h"
#include "opara/profile.h"

namespace opara {

// The occupancy limits of CUDA device `device`, from cudaGetDeviceProperties. Needs the GPU.
OPARA_API DeviceLimits device_limits(c10::DeviceIndex device);

}  // namespace opara
