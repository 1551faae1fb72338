#include "runtime/cuda/graph_capture.h"

#include <exception>

namespace opara {
namespace {

std::mutex& capture_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

GraphCapture::GraphCapture(CapturePool& pool, cudaStream_t origin, cudaStreamCaptureMode mode)
    : pool_(pool),
      origin_(origin),
      graph_(std::make_unique<InspectableGraph>(/*keep_graph=*/true)),
      turn_(capture_mutex()) {
  try {
    graph_->capture_begin(pool_.id(), mode);
  } catch (...) {
    end_tried_ = true;  // nothing to end: the capture never began
    abandon();
    throw;
  }
}

GraphCapture::~GraphCapture() {
  if (graph_) abandon();
}

std::unique_ptr<InspectableGraph> GraphCapture::end() {
  end_tried_ = true;
  try {
    graph_->capture_end();
  } catch (...) {
    abandon();
    throw;
  }
  turn_.unlock();
  return std::move(graph_);
}

void GraphCapture::abandon() noexcept {
  if (!graph_) return;
  if (!end_tried_) {
    end_tried_ = true;
    try {
      graph_->capture_end();  // a capture that is still valid ends the proper way
    } catch (const std::exception&) {
    }
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(origin_, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t broken = nullptr;
    (void)cudaStreamEndCapture(origin_, &broken);  // fails when unjoined or invalidated, but ends the capture
    if (broken) (void)cudaGraphDestroy(broken);
  }
  (void)cudaGetLastError();
  graph_->undo_failed_capture(pool_.id());
  graph_.reset();  // its reset() does the rest
  pool_.discard_streams();
  if (turn_.owns_lock()) turn_.unlock();
}

}  // namespace opara
