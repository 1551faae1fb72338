#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <memory>
#include <vector>

#include "exec/node_op.h"
#include "runtime/cuda/cuda_graph_executor.h"
#include "schedule/capture_actions.h"

namespace opara {

// What the capture actions do to a device: CUDA streams and events for the graph capturer, a
// recorder in tests.
class StreamBackend {
 public:
  virtual ~StreamBackend() = default;
  virtual void fork(int stream) = 0;
  virtual void join(int stream) = 0;
  virtual void record(int stream, NodeId node) = 0;
  virtual void wait(int stream, NodeId node) = 0;
  // Makes `stream` (or kOriginStream) current for the nodes that follow.
  virtual void enter(int stream) = 0;
  // `tensor` is read by a node on `stream` (MemoryProtection::kRecordStream only).
  virtual void read_on(const at::Tensor& tensor, int stream) = 0;
  // `node` has run on `stream` without throwing: a capturing backend checks that the capture
  // survived it (an op may break a capture without reporting an error).
  virtual void ran(int /*stream*/, NodeId /*node*/) {}
};

struct ActionRun {
  std::vector<c10::IValue> outputs;  // the graph's outputs
  std::vector<c10::IValue> kept;     // MemoryProtection::kKeepAlive: every intermediate, to hold until capture ends
};

// Executes `actions` once on `backend` with `ops` (by node id) from `inputs`. Intermediates are
// freed after their last reader (kRecordStream, each tensor a node reads reported to read_on
// first) or kept (kKeepAlive). Failures are opara::Error naming the node.
ActionRun run_actions(const Graph& graph, const std::vector<std::shared_ptr<const NodeOp>>& ops,
                      const std::vector<CaptureAction>& actions, const std::vector<c10::IValue>& inputs,
                      StreamBackend& backend, MemoryProtection memory);

}  // namespace opara
