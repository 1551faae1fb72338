#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "opara/graph.h"
#include "opara/profile.h"
#include "profile/kernel_attribution.h"

namespace opara {

// One CUPTI Activity API session: kernels (CONCURRENT_KERNEL, which keeps kernels concurrent),
// memcpys, memsets and external correlations are recorded into buffers CUPTI fills and hands back
// (cuptiActivityRegisterCallbacks); the CUDA runtime and driver API kinds are enabled too, because
// CUPTI writes an external correlation record only for API calls it records. Usage:
//
//   CuptiProfiler cupti;                  // throws CuptiUnavailable
//   for (node ...) { cupti.push(node); run(node); cupti.pop(); }
//   cudaDeviceSynchronize();
//   ActivityRecords records = cupti.take();   // flushed; throws if CUPTI dropped any
//
// The session subscribes to CUPTI (cuptiSubscribe_v2), as every CUPTI client must before
// profiling, so a second session, the PyTorch profiler or Nsight makes it fail cleanly instead of
// stealing or sharing the buffers. The buffer callbacks are plain functions without user data, so
// the session's state is process-wide: one session at a time. Neither copyable nor movable: the
// callbacks point at it.
class CuptiProfiler {
 public:
  // Throws CuptiUnavailable (include/opara/model_profiler.h) when CUPTI cannot be initialised,
  // is taken by another subscriber (named in the message), or refuses an activity kind.
  CuptiProfiler();
  // Disables the kinds, flushes and drops what is left, unsubscribes. Never throws: warns.
  ~CuptiProfiler();
  CuptiProfiler(const CuptiProfiler&) = delete;
  CuptiProfiler& operator=(const CuptiProfiler&) = delete;
  CuptiProfiler(CuptiProfiler&&) = delete;
  CuptiProfiler& operator=(CuptiProfiler&&) = delete;

  // The calling thread's CUDA calls until pop() belong to `node`
  // (CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0).
  void push(NodeId node);
  void pop();

  // Flushes CUPTI's buffers (call after the GPU work finished: a kernel's record is written when
  // it completes) and returns every record since the previous take(). Throws opara::Error when
  // CUPTI dropped records or a buffer could not be read: a profile missing kernels is wrong.
  [[nodiscard]] ActivityRecords take();

 private:
  struct Session;
  std::unique_ptr<Session> session_;
};

// Why CUPTI refused a subscription because another client holds it, from the name
// cuptiSubscribe_v2 reports for that client ("CUPTI for <its name>", "CUPTI for <not provided>" when
// it gave none) and whether the PyTorch profiler has traced in this process (Kineto subscribes
// without a name for its first trace and keeps the subscription after the trace stops, for the rest
// of the process, so "stop it" is no advice for it). CuptiProfiler's refusal message.
[[nodiscard]] std::string cupti_taken_message(std::string_view reported_holder, bool torch_profiler_traced);

}  // namespace opara
