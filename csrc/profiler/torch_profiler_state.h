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

// Whether the PyTorch profiler has prepared a trace in this process, now or earlier (Kineto is
// initialised). Kineto subscribes to CUPTI, without a name, for its first trace on a GPU machine and
// keeps the subscription when the trace stops (torch 2.11), so CUPTI stays taken until the process
// ends: this tells that holder from another tool that gives no name.
bool torch_profiler_traced();

}  // namespace opara
