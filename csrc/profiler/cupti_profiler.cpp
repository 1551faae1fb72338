#include "profiler/cupti_profiler.h"

#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <fmt/format.h>

#include <array>
#include <cstdlib>
#include <mutex>
#include <type_traits>
#include <utility>

#include "opara/error.h"
#include "opara/model_profiler.h"
#include "profile/kernel_attribution.h"
#include "profiler/torch_profiler_state.h"
#include "support/internal_assert.h"

namespace opara {
namespace {

// The activity records are read as this CUPTI's structs (CUpti_ActivityKernel10, ...): a library of
// another major version lays them out differently, and is refused at run time.
static_assert(CUPTI_API_VERSION / 10000 == 13, "the activity record structs below are CUDA 13's");
constexpr int kCuptiMajor = CUPTI_API_VERSION / 10000;

constexpr std::size_t kBufferBytes = 8 << 20;  // CUPTI's recommendation is 1-10 MiB
constexpr std::size_t kBufferAlignment = 8;    // records are 8-byte aligned

constexpr std::array kActivityKinds = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,    CUPTI_ACTIVITY_KIND_MEMCPY,  CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER,
};

std::string result_text(CUptiResult result) {
  const char* text = nullptr;
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || !text)
    return fmt::format("CUPTI error {}", static_cast<int>(result));
  return text;
}

void check(CUptiResult result, const char* call) {
  if (result != CUPTI_SUCCESS) throw Error(fmt::format("{} failed: {}", call, result_text(result)));
}

// For destructors: warn, never throw.
void check_warn(CUptiResult result, const char* call) {
  if (result != CUPTI_SUCCESS) TORCH_WARN(call, " failed: ", result_text(result));
}

// What the buffer callbacks fill; process-wide because the callbacks carry no user data.
struct Collector {
  ActivityRecords records;
  std::size_t dropped = 0;
  std::size_t incomplete_buffers = 0;  // a buffer that ended in a half-written record
  std::size_t untimed = 0;             // kernels and copies CUPTI could not time (zero timestamps)
  std::string failure;                 // the first error met inside a callback, which cannot throw
};

// Guards `active_collector` and what it points at: a callback on CUPTI's worker thread must not
// append to a session being destroyed, so it holds this from reading the pointer to the end.
std::mutex collector_mutex;
Collector* active_collector = nullptr;

std::string memcpy_kind(std::uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy PtoP";
    default: return "memcpy (array)";
  }
}

// CUPTI writes zero timestamps when it had no device memory to record them.
bool untimed(std::uint64_t start, std::uint64_t end) {
  return start == 0 || end < start;
}

void add_record(const CUpti_Activity* record, ActivityRecords& into, std::size_t& untimed_records) {
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      KernelRecord out;
      out.name = kernel->name ? kernel->name : "";
      out.grid = Dim3{kernel->gridX, kernel->gridY, kernel->gridZ};
      out.block = Dim3{kernel->blockX, kernel->blockY, kernel->blockZ};
      out.registers_per_thread = kernel->registersPerThread;
      out.static_smem = kernel->staticSharedMemory;
      out.dynamic_smem = kernel->dynamicSharedMemory;
      out.local_mem_per_thread = kernel->localMemoryPerThread;
      out.start_ns = kernel->start;
      out.end_ns = kernel->end;
      out.stream = kernel->streamId;
      out.correlation_id = kernel->correlationId;
      untimed_records += untimed(out.start_ns, out.end_ns);
      into.kernels.push_back(std::move(out));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      // correlationId names the driver API call; runtimeCorrelationId the runtime call
      // (cudaMemcpyAsync) that made it: attribution looks for either.
      const auto* copy = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      into.copies.push_back(CopyRecord{memcpy_kind(copy->copyKind), copy->bytes, copy->start, copy->end, copy->streamId,
                                       copy->correlationId, copy->runtimeCorrelationId});
      untimed_records += untimed(copy->start, copy->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* set = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      into.copies.push_back(CopyRecord{"memset", set->bytes, set->start, set->end, set->streamId, set->correlationId});
      untimed_records += untimed(set->start, set->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const auto* pair = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
      if (pair->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) {
        into.correlations.push_back(ExternalCorrelation{pair->correlationId, pair->externalId});
      }
      break;
    }
    default: break;  // runtime and driver API records: enabled only so that correlations are written
  }
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(kBufferAlignment, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;  // no buffer: CUPTI counts the records it drops
  *max_records = 0;                    // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext context, std::uint32_t stream, std::uint8_t* buffer, std::size_t /*size*/,
                               std::size_t valid_size) {
  ActivityRecords parsed;  // copied out, so that the buffer goes back at once
  std::string failure;
  std::size_t untimed_records = 0;
  bool incomplete = false;
  CUpti_Activity* record = nullptr;
  for (;;) {
    const CUptiResult status = cuptiActivityGetNextRecord(buffer, valid_size, &record);
    if (status == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // the end of the valid records
    if (status == CUPTI_ERROR_INVALID_KIND) {            // a record still being written (forced flush)
      incomplete = true;
      break;
    }
    if (status != CUPTI_SUCCESS) {
      failure = fmt::format("cuptiActivityGetNextRecord failed: {}", result_text(status));
      break;
    }
    add_record(record, parsed, untimed_records);
  }
  std::free(buffer);
  std::size_t dropped = 0;
  const CUptiResult status = cuptiActivityGetNumDroppedRecords(context, stream, &dropped);
  if (status != CUPTI_SUCCESS && failure.empty()) {
    failure = fmt::format("cuptiActivityGetNumDroppedRecords failed: {}", result_text(status));
  }
  std::lock_guard<std::mutex> lock(collector_mutex);
  Collector* collector = active_collector;
  if (!collector) return;  // the session ended: nobody reads these records
  auto append = [](auto& to, auto& from) { to.insert(to.end(), from.begin(), from.end()); };
  append(collector->records.kernels, parsed.kernels);
  append(collector->records.copies, parsed.copies);
  append(collector->records.correlations, parsed.correlations);
  collector->dropped += dropped;
  collector->incomplete_buffers += incomplete;
  collector->untimed += untimed_records;
  if (collector->failure.empty()) collector->failure = failure;
}

// Subscribing does nothing but claim CUPTI; no callback domain is enabled.
void CUPTIAPI ignore_callback(void* /*userdata*/, CUpti_CallbackDomain /*domain*/, CUpti_CallbackId /*id*/,
                              const void* /*data*/) {}

}  // namespace

// Undoes what the constructor got to, in reverse: the destructor of a half-built profiler too.
struct CuptiProfiler::Session {
  Collector collector;
  CUpti_SubscriberHandle subscriber = nullptr;
  bool collecting = false;  // `collector` is the one the callbacks fill
  std::vector<CUpti_ActivityKind> enabled;
  int pushed = 0;  // ids pushed and not popped yet (a node failed between push and pop)

  Session() = default;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session() {
    for (; pushed > 0; --pushed) {
      check_warn(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, nullptr),
                 "cuptiActivityPopExternalCorrelationId");
    }
    for (CUpti_ActivityKind kind : enabled) check_warn(cuptiActivityDisable(kind), "cuptiActivityDisable");
    if (!enabled.empty()) check_warn(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    if (collecting) {
      std::lock_guard<std::mutex> lock(collector_mutex);
      active_collector = nullptr;  // buffers still to come are freed unread
    }
    if (subscriber) check_warn(cuptiUnsubscribe(subscriber), "cuptiUnsubscribe");
  }
};

std::string cupti_taken_message(std::string_view reported_holder, bool torch_profiler_traced) {
  constexpr std::string_view kPrefix = "CUPTI for ";  // how CUPTI reports a subscriber's name
  std::string_view name = reported_holder;
  if (name.substr(0, kPrefix.size()) == kPrefix) name.remove_prefix(kPrefix.size());
  constexpr std::string_view kOnlyOne = "only one CUPTI client may profile a process at a time";
  if (!name.empty() && name != "<not provided>") {
    return fmt::format(
        "CUPTI is taken by {}: {}; stop it (the PyTorch profiler, Nsight Systems or Compute, another "
        "opara profile) and profile again",
        name, kOnlyOne);
  }
  if (torch_profiler_traced) {
    return fmt::format(
        "CUPTI is taken by a client that gave no name, most likely the PyTorch profiler (Kineto): it subscribes to "
        "CUPTI for its first trace in a process and keeps the subscription after the trace stops, until the process "
        "ends; {}: profile with opara in a process that has not traced with the PyTorch profiler",
        kOnlyOne);
  }
  return fmt::format(
      "CUPTI is taken by a client that gave no name (Nsight Systems or Compute, or another tool profiling this "
      "process): {}; stop it and profile again",
      kOnlyOne);
}

CuptiProfiler::CuptiProfiler() : session_(std::make_unique<Session>()) {
  if (const std::optional<std::string> active = active_torch_profiler()) {
    throw CuptiUnavailable(fmt::format(
        "{} in this process, and it records CUDA activity through CUPTI's buffers, which one client at a time may "
        "have: profile with opara outside torch.profiler's context (or stop it first)",
        *active));
  }
  // Without a GPU CUPTI has nothing to record, and is not asked: some releases (the CUPTI 13.2 that
  // torch 2.15's wheel brings) recurse until the stack overflows when called with no driver.
  int devices = 0;
  const cudaError_t counted = cudaGetDeviceCount(&devices);
  if (counted != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    throw CuptiUnavailable(fmt::format("CUPTI cannot be used here: no CUDA GPU is visible ({})",
                                       counted != cudaSuccess ? cudaGetErrorString(counted) : "0 devices"));
  }
  std::uint32_t loaded_version = 0;
  const CUptiResult versioned = cuptiGetVersion(&loaded_version);
  if (versioned != CUPTI_SUCCESS) {
    throw CuptiUnavailable(
        fmt::format("CUPTI cannot be used here: cuptiGetVersion failed: {}", result_text(versioned)));
  }
  if (static_cast<int>(loaded_version / 10000) != kCuptiMajor) {
    throw CuptiUnavailable(fmt::format(
        "the CUPTI library loaded in this process has API version {}, and opara reads the activity records of CUPTI "
        "{}.x (built with {}): put CUDA {}'s libcupti first on the library path",
        loaded_version, kCuptiMajor, CUPTI_API_VERSION, kCuptiMajor));
  }
  std::array<char, CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN> holder{};
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "opara profiler";
  params.oldSubscriberName = holder.data();
  params.oldSubscriberSize = holder.size();
  const CUptiResult subscribed = cuptiSubscribe_v2(&session_->subscriber, ignore_callback, nullptr, &params);
  if (subscribed == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    session_->subscriber = nullptr;
    holder.back() = '\0';
    throw CuptiUnavailable(cupti_taken_message(holder.data(), torch_profiler_traced()));
  }
  if (subscribed != CUPTI_SUCCESS) {
    session_->subscriber = nullptr;
    throw CuptiUnavailable(fmt::format(
        "CUPTI cannot be used here (no CUDA driver or GPU, or no permission?): cuptiSubscribe_v2 failed: {}",
        result_text(subscribed)));
  }
  {
    std::lock_guard<std::mutex> lock(collector_mutex);
    if (active_collector) {
      throw CuptiUnavailable("another opara CUPTI session is active in this process: profile one model at a time");
    }
    active_collector = &session_->collector;
    session_->collecting = true;
  }
  const CUptiResult registered = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (registered != CUPTI_SUCCESS) {
    throw CuptiUnavailable(fmt::format("cuptiActivityRegisterCallbacks failed: {}", result_text(registered)));
  }
  for (CUpti_ActivityKind kind : kActivityKinds) {
    const CUptiResult enabled = cuptiActivityEnable(kind);
    if (enabled != CUPTI_SUCCESS) {
      throw CuptiUnavailable(
          fmt::format("CUPTI refuses to record activity kind {}: {}", static_cast<int>(kind), result_text(enabled)));
    }
    session_->enabled.push_back(kind);
  }
}

// Out of line: Session is complete only here.
CuptiProfiler::~CuptiProfiler() = default;
static_assert(std::is_nothrow_destructible_v<CuptiProfiler>, "cleanup warns, never throws");

void CuptiProfiler::push(NodeId node) {
  check(
      cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, static_cast<std::uint64_t>(node)),
      "cuptiActivityPushExternalCorrelationId");
  ++session_->pushed;
}

void CuptiProfiler::pop() {
  OPARA_ASSERT(session_->pushed > 0, "CuptiProfiler::pop() without push()");
  check(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, nullptr),
        "cuptiActivityPopExternalCorrelationId");
  --session_->pushed;
}

ActivityRecords CuptiProfiler::take() {
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  std::size_t dropped_globally = 0;
  check(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped_globally), "cuptiActivityGetNumDroppedRecords");
  // What this flush found, taken whole: each problem below leaves its records incomplete or
  // untimed, and the profile fails rather than miss kernels or weigh them wrongly.
  Collector found;
  {
    std::lock_guard<std::mutex> lock(collector_mutex);
    found = std::exchange(session_->collector, Collector{});
  }
  if (!found.failure.empty()) throw Error("CUPTI activity buffer: " + found.failure);
  const std::size_t dropped = found.dropped + dropped_globally;
  if (dropped > 0) {
    throw Error(fmt::format(
        "CUPTI dropped {} activity records (no buffer space): the profile would miss kernels; profile fewer runs at "
        "a time",
        dropped));
  }
  if (found.incomplete_buffers > 0) {
    throw Error(fmt::format(
        "CUPTI returned {} activity buffer(s) ending in a record still being written: take() ran while the GPU "
        "was busy; synchronize the device before taking the records",
        found.incomplete_buffers));
  }
  if (found.untimed > 0) {
    throw Error(fmt::format(
        "CUPTI could not time {} kernels or copies (zero timestamps: no device memory for its records); free GPU "
        "memory and profile again",
        found.untimed));
  }
  return std::move(found.records);
}

}  // namespace opara
