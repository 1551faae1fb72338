#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>

#include "runtime/cuda/capture_pool.h"
#include "runtime/cuda/cuda_graph_compat.h"

namespace opara {

// One capture into a CapturePool, begun on construction and ended by end(), with one way out when
// it fails part-way (abandon) that leaves LibTorch's caching allocators as they were.
// CUDAGraph::capture_begin registers the pool, with a filter that points at the graph, with the
// device and host allocators before cudaStreamBeginCapture; capture_end unregisters it only after
// cudaStreamEndCapture succeeds. Left registered, every later allocation would call into a freed
// graph, blocks kept by record_stream would stay deferred for good, and the pool's reference count
// would never reach zero. opara's captures take turns (the allocators take one capture into a pool
// at a time), so capture_begin cannot fail half-way for that reason, and a failure after it set
// its device is known to have registered both allocators.
class GraphCapture {
 public:
  // Takes this process's turn to capture and begins one on `origin`, which the caller made the
  // current stream. When beginning fails it is undone, and this rethrows. opara always captures in
  // thread-local mode; `mode` lets a test make cudaStreamBeginCapture itself fail.
  GraphCapture(CapturePool& pool, cudaStream_t origin, cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal);
  // Abandons a capture neither ended nor abandoned.
  ~GraphCapture();
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;

  // Ends the capture and gives back its graph (kept, so that its nodes can be counted), ready to
  // instantiate. When ending fails the capture is abandoned, and this rethrows.
  std::unique_ptr<InspectableGraph> end();
  // Ends a capture that failed part-way: the stream capture by hand, then what this torch's
  // CUDAGraph leaves behind (InspectableGraph::undo_failed_capture: the random generators' capture
  // mode, the allocators' recording into the pool and the reference to it capture_begin took), and
  // destroys the graph, whose reset() does the rest. The pool's streams are discarded. Each step
  // may have been done before the failure, so errors are ignored.
  void abandon() noexcept;

 private:
  CapturePool& pool_;
  cudaStream_t origin_;
  std::unique_ptr<InspectableGraph> graph_;  // null once ended or abandoned
  std::unique_lock<std::mutex> turn_;
  bool end_tried_ = false;  // capture_end was called (abandon calls it only otherwise)
};

}  // namespace opara
