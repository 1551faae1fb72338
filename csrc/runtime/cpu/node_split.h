#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "exec/node_op.h"
#include "opara/graph.h"

namespace opara {

// How one run of a node splits into pieces that workers run side by side: its tensor argument is
// cut along `dim` (batch, or channels when the batch is 1) at `bounds` (pieces + 1 indices, first
// 0, last the size), each piece runs the node's own op on its slice, and each result lands in its
// part of the output. For ops that compute each plane on its own (OpTraits::splits_by_plane), the
// result has the same bits as the whole run: every cut falls on a multiple of 64 elements, so
// vectorised loops see the same chunks and tails.
struct NodeSplit {
  std::int64_t dim = 0;
  std::vector<std::int64_t> bounds;
  [[nodiscard]] int pieces() const { return static_cast<int>(bounds.size()) - 1; }
};

// A split of node `id` into at most `pieces` for these runtime inputs, or nothing when the node is
// not of a splitting kind, its argument is not one contiguous, dense, floating-point CPU tensor
// (with no other tensor argument), it has no batch or channel dimension of more than one (the
// op table's plane dimensions are never cut), or no cut falls on a 64-element boundary.
std::optional<NodeSplit> split_node(const Graph& graph, NodeId id, const std::vector<c10::IValue>& inputs, int pieces);

// The pieces' results gathered into the node's output; thread-safe, each piece placed once.
class SplitOutput {
 public:
  explicit SplitOutput(NodeSplit split) : split_(std::move(split)) {}

  // Runs piece `piece` of node `id` on its slice of `inputs` and places its result. Throws
  // opara::NodeError naming the node when it fails; a result not shaped like its slice is a bug
  // (opara::InternalError).
  void run_piece(const Graph& graph, NodeId id, const NodeOp& op, const std::vector<c10::IValue>& inputs, int piece);

  // The whole output, once every piece has been placed.
  [[nodiscard]] at::Tensor take();

  [[nodiscard]] const NodeSplit& split() const { return split_; }

 private:
  NodeSplit split_;
  std::mutex mutex_;  // guards the allocation of `output_`
  at::Tensor output_;
};

}  // namespace opara
