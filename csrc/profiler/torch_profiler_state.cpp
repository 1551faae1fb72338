#include "profiler/torch_profiler_state.h"

#include <kineto/libkineto.h>
#include <torch/csrc/profiler/orchestration/observer.h>

namespace opara {

std::optional<std::string> active_torch_profiler() {
  // Kineto is active from prepareTrace (torch.profiler.profile's start, before its schedule's
  // warm-up) until stopTrace; the observer is on while events are recorded on this thread.
  libkineto::LibkinetoApi& kineto = libkineto::api();
  if (kineto.isProfilerRegistered() && kineto.activityProfiler().isActive()) {
    return "the PyTorch profiler (torch.profiler, Kineto) is tracing";
  }
  if (torch::profiler::impl::profilerEnabled()) return "the PyTorch profiler (torch.autograd.profiler) is on";
  return std::nullopt;
}

bool torch_profiler_traced() {
  return libkineto::api().isProfilerInitialized();
}

}  // namespace opara
