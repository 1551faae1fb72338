#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <optional>
#include <string>
#include <vector>

#include "opara/costs.h"
#include "opara/export.h"
#include "opara/graph.h"

namespace opara {

// The costs Alg. 2 orders a model's launches by, and where they came from.
struct ModelCosts {
  std::vector<NodeCost> costs;
  std::string source;  // "profile", "shapes" (recorded on the examples) or "none" (the op table alone)
};

struct CostOptions {
  std::string profile;  // a recorded profile; empty: estimate
  double ridge_point = kDefaultRidgePoint;
  // A full profile must be of this model file, of the examples' shapes and dtypes and, with a CUDA
  // `device`, of its GPU; a mismatch throws naming what differs, or warns when this is set.
  bool allow_profile_mismatch = false;
  std::optional<c10::Device> device;
};

// From the recorded profile when one is given; else estimated from the shapes one eager run on CPU
// copies of `examples` records (no device time, same shapes); else, without examples, from the op
// table alone.
OPARA_API ModelCosts model_costs(const Graph& graph, const std::vector<at::Tensor>& examples,
                                 const CostOptions& options = {});

}  // namespace opara
