#pragma once

#include <ATen/core/Tensor.h>

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

// From the recorded profile at `profile` when it is not empty; else estimated from the shapes one
// eager run on CPU copies of `examples` records (no device time, same shapes); else, without
// examples, from the op table alone.
OPARA_API ModelCosts model_costs(const Graph& graph, const std::vector<at::Tensor>& examples,
                                 const std::string& profile = {}, double ridge_point = kDefaultRidgePoint);

}  // namespace opara
