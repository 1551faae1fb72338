#pragma once

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDAStream.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "runtime/cuda/cuda_event.h"
#include "runtime/cuda/cuda_graph_compat.h"
#include "runtime/cuda/stream_lease.h"

namespace opara {

// What the CUDA graphs captured together share, owned in one place: a graph memory pool (a
// reference to it held in LibTorch's allocators while this lives), the streams they warm up and
// capture on, and the turns in which the models sharing it run. compile() makes one per model or
// finds the one Options::cuda.memory_pool names; a GraphSet makes one for its buckets. Graphs hold
// it while they live: the pool holds the cuBLAS and cuBLASLt workspace of each (handle, stream)
// its graphs were captured with (BlasWorkspaces), so they and the streams are given back only when
// the last graph is gone.
class CapturePool {
 public:
  // A new pool on `device`: id() names it to later compiles.
  static std::shared_ptr<CapturePool> create(c10::DeviceIndex device);
  // The live pool named `named`, or a new one over that id (an at::cuda::graph_pool_handle() of the
  // caller's) that later compiles naming it share; a null id (see is_null_pool_id): a new pool.
  // An id named again after its last pool is gone gets a new pool under a fresh id (id() tells).
  static std::shared_ptr<CapturePool> find_or_create(c10::DeviceIndex device, c10::MempoolId_t named);
  ~CapturePool();
  CapturePool(const CapturePool&) = delete;
  CapturePool& operator=(const CapturePool&) = delete;

  [[nodiscard]] c10::MempoolId_t id() const { return id_; }
  [[nodiscard]] c10::DeviceIndex device() const { return device_; }

  // How many streams a capture of a plan with `plan_streams` streams uses: the plan's and an
  // origin (capture cannot fork from the default stream).
  static constexpr std::size_t streams_for(int plan_streams) { return static_cast<std::size_t>(plan_streams) + 1; }
  // The streams of one capture: the origin first, then the plan's. Every capture into the pool gets
  // a prefix of one list, grown as a plan needs: the caching allocator reuses a block one capture
  // freed only on the stream that allocated it, so a later graph reuses an earlier one's memory.
  // Captures into one pool take turns, so they never use the streams at once.
  [[nodiscard]] std::vector<c10::cuda::CUDAStream> capture_streams(int plan_streams);
  // After a failed capture a stream may still be capturing: the streams are never lent again.
  void discard_streams();

  // The pool's cuBLAS workspaces, lent to LibTorch for a capture's warm-ups and the capture itself
  // (which bakes their addresses in), and taken back when the returned loan ends, however the
  // capture ends. One workspace per (handle, stream) for every graph in the pool: they replay in
  // turn, never at once.
  class WorkspaceLoan {
   public:
    explicit WorkspaceLoan(CapturePool& pool) : pool_(pool) { pool_.lend_workspaces(); }
    ~WorkspaceLoan() { pool_.take_workspaces(); }
    WorkspaceLoan(const WorkspaceLoan&) = delete;
    WorkspaceLoan& operator=(const WorkspaceLoan&) = delete;

   private:
    CapturePool& pool_;
  };
  [[nodiscard]] std::size_t workspaces_held() const;
  [[nodiscard]] std::size_t workspace_bytes() const;

  // Runs `run` on the current stream after the work of the last run_in_turn, one at a time:
  // models that share the pool reuse each other's memory, so their runs may not overlap.
  void run_in_turn(const std::function<void()>& run);

 private:
  CapturePool(c10::DeviceIndex device, c10::MempoolId_t id);
  void lend_workspaces();
  void take_workspaces() noexcept;

  c10::DeviceIndex device_;
  c10::MempoolId_t id_;
  std::mutex streams_mutex_;
  std::vector<std::unique_ptr<StreamLease>> leases_;  // grown a lease at a time
  std::vector<c10::cuda::CUDAStream> streams_;        // the leases' streams, in order
  mutable std::mutex workspaces_mutex_;
  std::unique_ptr<BlasWorkspaces> workspaces_;  // freed before the pool is released
  std::mutex run_mutex_;
  std::optional<CudaEvent> last_run_;
};

// Options::cuda.memory_pool's {0, 0}: no pool named, the model captures into one of its own.
[[nodiscard]] constexpr bool is_null_pool_id(c10::MempoolId_t id) {
  return id.first == 0 && id.second == 0;
}

}  // namespace opara
