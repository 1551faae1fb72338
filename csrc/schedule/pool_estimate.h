#pragma once

// The memory pool a plan's CUDA graph will reserve, estimated without a GPU from the shapes one
// run recorded: the capture's allocations and frees replayed, in the capture's order and on its
// streams (capture_actions), through a model of the caching allocator (caching_allocator_model.h).
// The measured pool decides (CompiledStats::pool_bytes); the estimate plans: it caps a plan's
// streams until the pool fits the memory budget before anything is captured.

#include <cstddef>
#include <vector>

#include "opara/graph.h"
#include "opara/plan.h"

namespace opara {

// How the capture keeps a tensor another stream reads from being reused too early
// (MemoryProtection's two captures).
enum class CaptureHold : std::uint8_t {
  kRecordStream,  // a tensor read on another stream than its own is held until the capture ends
  kKeepAlive,     // every tensor is held until the capture ends
};

struct PoolEstimate {
  std::size_t pool_bytes = 0;       // the segments reserved: what CompiledStats::pool_bytes measures
  std::size_t peak_live_bytes = 0;  // the most bytes of blocks in use at once
  std::size_t held_bytes = 0;       // of blocks never freed during the capture (outputs included)
};

// The capture's results: a kernel node's results are new tensors unless it is a view or writes
// in place; a tensor lives until the last node that reads it or any view of it has run (the
// graph's outputs and what they view, for good), on the stream it was allocated on. Tensors a
// node allocates and frees inside itself (workspaces, an Inductor region's buffers) are not seen.
// `shapes`: by node id (record_shapes); empty gives an empty estimate.
PoolEstimate estimate_pool(const Graph& graph, const Plan& plan, const std::vector<NodeShapes>& shapes,
                           CaptureHold hold = CaptureHold::kRecordStream);

// The cuBLAS workspaces a plan's graphs hold beside their pool: `bytes_per_stream` for each stream
// that runs a node on cuBLAS (OpTraits::uses_blas). LibTorch keeps one per (handle, stream); on the
// GPU runs they, not the pool, were most of a multi-stream plan's memory (H100: a decode step of
// 28 streams peaked at 909 MiB against eager's 108, and 28 workspaces are 896 MiB; H200: bert_base's
// 16 streams at 1455 MiB against the sequential graph's 420, their pool 32 MiB).
std::size_t estimate_blas_workspaces(const Graph& graph, const Plan& plan, std::size_t bytes_per_stream);

// LibTorch's cuBLAS workspace a stream on Hopper (its default CUBLAS_WORKSPACE_CONFIG there,
// :4096:8): what `opara-bench plan` assumes without a GPU; compile() asks LibTorch.
inline constexpr std::size_t kHopperBlasWorkspaceBytes = std::size_t{32} << 20;

// The cap (PlanOptions::max_streams) under which make_plan(graph, options, costs) is estimated to
// fit `budget_bytes` with its pool and its cuBLAS workspaces (`blas_workspace_bytes` a stream): 0
// when the plan fits as it is, else the most streams that fit (1 when only the sequential graph
// does, or nothing fits). `options.max_streams` is ignored.
int stream_cap_within(const Graph& graph, PlanOptions options, const std::vector<NodeCost>& costs,
                      const std::vector<NodeShapes>& shapes, std::size_t budget_bytes,
                      CaptureHold hold = CaptureHold::kRecordStream, std::size_t blas_workspace_bytes = 0);

}  // namespace opara
