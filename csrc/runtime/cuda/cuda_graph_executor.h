#pragma once

#include <ATen/core/ivalue.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "opara/graph.h"
#include "opara/options.h"
#include "opara/plan.h"

namespace opara {

class CapturePool;

struct CudaGraphOptions {
  MemoryProtection memory = MemoryProtection::kRecordStream;
  // Eager runs of the plan on the capture streams before capture, so that cuBLAS and cuDNN
  // handles and workspaces exist outside the graph's memory pool. At least 2.
  int warmup_runs = 2;
  // The memory pool and streams shared with other graphs that replay in capture order (the
  // segments of one model, the buckets of a graph set): a later graph captured on an earlier one's
  // streams reuses that graph's intermediates. Null: a pool of the graph's own.
  std::shared_ptr<CapturePool> pool;
};

struct CaptureStats {
  int streams = 0;                 // side streams captured
  std::size_t events = 0;          // cross-stream waits captured (the plan's, after reduction)
  std::size_t captured_nodes = 0;  // graph nodes that launch kernels
  std::size_t graph_nodes = 0;     // nodes of the CUDA graph (kernels, copies, memsets)
  double warmup_ms = 0;
  double capture_ms = 0;  // capture and instantiation
  // Bytes the capture took from the driver for the graph's memory pool: what the graph's
  // intermediates cost (less where a shared pool already had room).
  std::size_t pool_bytes = 0;
};

// Captures a Plan into one CUDA graph over many streams, then replays it with one launch.
// Capture begins on a stream of its own; the Plan's streams are side streams forked from it and
// joined back; the Plan's events become graph dependencies. The graph reads `static_inputs` and
// writes `static_outputs()`: copy new inputs into the former before replay() (CudaModel does).
// A 0-dim CPU tensor among the static inputs is a scalar argument: it is read while capturing and
// its value baked into the graph, so a new value copied into it has no effect on replay (CudaModel
// checks that it still holds the captured value and runs eagerly otherwise); any other CPU input
// is refused. Throws opara::Error naming the node when an operation cannot be captured.
class CudaGraphExecutor {
 public:
  CudaGraphExecutor(const Graph& graph, Plan plan, std::vector<c10::IValue> static_inputs,
                    CudaGraphOptions options = {});
  ~CudaGraphExecutor();
  CudaGraphExecutor(const CudaGraphExecutor&) = delete;
  CudaGraphExecutor& operator=(const CudaGraphExecutor&) = delete;

  // Launches the graph on the current CUDA stream.
  void replay();

  [[nodiscard]] const std::vector<c10::IValue>& static_inputs() const;
  [[nodiscard]] const std::vector<c10::IValue>& static_outputs() const;
  [[nodiscard]] const Plan& plan() const;
  [[nodiscard]] const CaptureStats& stats() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace opara
