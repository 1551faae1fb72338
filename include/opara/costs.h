#pragma once

// Where Alg. 2's resource demands and compute/memory classes come from.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "opara/export.h"
#include "opara/graph.h"
#include "opara/plan.h"
#include "opara/profile.h"

namespace opara {

struct OPARA_API TensorShape {
  std::vector<std::int64_t> sizes;
  std::int64_t element_bytes = 0;
  [[nodiscard]] std::int64_t numel() const;
  [[nodiscard]] std::int64_t bytes() const { return numel() * element_bytes; }
};

// What one run on example inputs tells about a node's tensors.
struct NodeShapes {
  // The operator's call arguments in schema order, constants (weights) folded back in: the
  // tensors of each argument (none for a non-tensor, several for a list).
  std::vector<std::vector<TensorShape>> arguments;
  std::vector<TensorShape> outputs;
};

// FLOPs per byte above which an operator counts as compute-bound. 16 sits near the FP32 ridge of
// recent data-centre GPUs (H100/H200: about 67 TFLOP/s over 3.4-4.8 TB/s).
inline constexpr double kDefaultRidgePoint = 16.0;

// The static estimate. Bytes: every tensor read or written, weights included (views move none).
// FLOPs: 2*M*N*K for matrix products and convolutions (K from the input and weight shapes), one
// per output element otherwise. Class: the op table's (csrc/schedule/op_classes.cpp), and a
// compute-class op whose FLOPs per byte fall below `ridge_point` counts as memory-bound.
// Demand: the roofline cost max(bytes, FLOPs / ridge_point), in bytes.
// `shapes` empty: classes from the table alone and equal demands.
OPARA_API std::vector<NodeCost> estimate_costs(const Graph& graph, const std::vector<NodeShapes>& shapes,
                                               double ridge_point = kDefaultRidgePoint);

// 2*M*N*K for convolutions, matrix products and attention, from the shapes; nullopt for other
// operators and when the shapes do not give the formula its terms.
OPARA_API std::optional<double> dense_flops(std::string_view kind, const NodeShapes& shapes);

// Costs from a recorded profile: a full one (opara::Profile, written by the profiler; checked
// against `match` first, see require_profile_matches) or the minimal form {"nodes": [{"id",
// "kind", "class": "compute"|"memory", "demand"}...]}, which carries nothing to check. Throws
// opara::Error naming the file and the node when the profile does not belong to this graph.
OPARA_API std::vector<NodeCost> costs_from_profile(const Graph& graph, const std::string& path,
                                                   const ProfileMatch& match = {});

}  // namespace opara
