#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "opara/export.h"

namespace opara {

// A node's index in its Graph, as opara/graph.h declares it (errors come below graphs).
using NodeId = std::int32_t;

// A user-facing error: a bad model file, an unsupported construct, a wrong input. The message
// names the file, the node (kind and source location where known) and what to do about it.
// Bugs in opara itself are internal asserts, never this type.
class OPARA_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A bug in opara itself: an invariant broke that no model, input or option can break. Raised by
// OPARA_ASSERT (csrc/support/internal_assert.h) alone; the message says where, and asks for a report.
class OPARA_API InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

// A node of a graph failed; the message names it, `node()` says which for callers that act on it.
class OPARA_API NodeError : public Error {
 public:
  NodeError(const std::string& message, NodeId node) : Error(message), node_(node) {}
  [[nodiscard]] NodeId node() const { return node_; }

 private:
  NodeId node_;
};

// A node that ran eagerly on the GPU but failed while a CUDA graph was captured: it synchronises
// with the host or has a data-dependent shape. CompiledModel turns it into a host step.
class OPARA_API CaptureError : public NodeError {
 public:
  using NodeError::NodeError;
};

}  // namespace opara
