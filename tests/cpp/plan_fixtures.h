#pragma once

#include <random>
#include <vector>

#include "opara/graph.h"
#include "opara/plan.h"

namespace opara::testing {

inline constexpr StreamPolicy kStreamPolicies[] = {StreamPolicy::kOpara, StreamPolicy::kOparaUnhanded,
                                                   StreamPolicy::kNimble, StreamPolicy::kSingle};
inline constexpr OrderPolicy kOrderPolicies[] = {OrderPolicy::kTopological, OrderPolicy::kOpara};

// Random demands and classes, so that Alg. 2 orders launches differently from program order.
inline std::vector<NodeCost> random_costs(const Graph& graph, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<NodeCost> costs(graph.size());
  for (NodeCost& cost : costs) {
    cost.op_class = random() % 2 ? OpClass::kMemory : OpClass::kCompute;
    cost.demand = static_cast<double>(random() % 1000);
  }
  return costs;
}

}  // namespace opara::testing
