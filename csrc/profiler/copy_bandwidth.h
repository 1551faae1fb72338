#pragma once

#include <c10/core/Device.h>

namespace opara {

struct CopyBandwidth {
  double h2d_bytes_per_s = 0;  // pinned host memory to the device
  double d2h_bytes_per_s = 0;  // the device to pinned host memory
};

// Pinned copy bandwidth of CUDA device `device`: the median of a few 64 MiB copies each way,
// timed with CUDA events on the current stream. Measured once per device and process, then
// remembered. Needs the GPU.
CopyBandwidth copy_bandwidth(c10::DeviceIndex device);

}  // namespace opara
