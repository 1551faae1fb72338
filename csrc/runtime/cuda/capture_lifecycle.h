#pragma once

#include <c10/core/Device.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <cuda_runtime_api.h>

#include <mutex>

#include "runtime/cuda/cuda_graph_compat.h"

namespace opara {

// Starting and abandoning a capture so that a failure leaves LibTorch's caching allocators as
// they were. CUDAGraph::capture_begin registers the pool, with a filter that points at the graph,
// with the device and host allocators before cudaStreamBeginCapture; capture_end unregisters it
// only after cudaStreamEndCapture succeeds. Left registered, every later allocation would call
// into a freed graph, blocks kept by record_stream would stay deferred for good, and the pool's
// reference count would never reach zero.

// graph.capture_begin(pool) on the current stream (`origin`) in thread-local mode, undone when it
// fails (then it rethrows). Returns this process's turn to capture, to hold until the capture ends
// or is abandoned: opara's captures take turns, since the allocators take one capture into a pool
// at a time, so capture_begin cannot fail half-way for that reason, and a failure after it set
// its device is known to have registered both allocators.
[[nodiscard]] std::unique_lock<std::mutex> begin_capture(InspectableGraph& graph, c10::MempoolId_t pool,
                                                         c10::DeviceIndex device, cudaStream_t origin);

// Ends a capture that failed part-way by hand: the stream capture, the random generators'
// capture mode, the allocators' recording into `pool` and the reference to it capture_begin took
// (unless capture_end got as far as marking the capture ended: then the graph releases its pool).
// Errors are ignored: each step may have been done before the failure.
void abandon_capture(InspectableGraph& graph, c10::DeviceIndex device, c10::MempoolId_t pool,
                     cudaStream_t origin) noexcept;

}  // namespace opara
