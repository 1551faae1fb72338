#pragma once

#include <optional>
#include <string>

namespace opara {

// Whether the PyTorch profiler (torch.profiler, torch.autograd.profiler, Kineto) is profiling in
// this process, from preparing a trace to stopping it, and if so what is active. Kineto records
// CUDA activity through CUPTI's activity API, whose buffer callbacks one client per process
// registers, and it may do so without subscribing to CUPTI: an opara CUPTI session then would take
// over its buffers and switch off kinds it enabled. So opara does not profile while it is active.
std::optional<std::string> active_torch_profiler();

}  // namespace opara
