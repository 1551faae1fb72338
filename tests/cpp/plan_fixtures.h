#pragma once

#include <random>
#include <vector>

#include "opara/graph.h"
#include "opara/plan.h"

namespace opara::testing {

inline constexpr StreamPolicy kStreamPolicies[] = {StreamPolicy::kOpara,  StreamPolicy::kOparaUnhanded,
                                                   StreamPolicy::kNimble, StreamPolicy::kSingle,
                                                   StreamPolicy::kTrtllm, StreamPolicy::kTorchsched};
inline constexpr OrderPolicy kOrderPolicies[] = {OrderPolicy::kTopological, OrderPolicy::kOpara, OrderPolicy::kTrtllm};

// The plans executors are tested under: every stream policy, Opara's under both of its launch
// orders, the others under the order their authors launch in. An executor runs any valid plan the
// same way, so the full product of the lists above (which the planner's tests sweep) would time
// the same code again.
struct PlanPolicies {
  StreamPolicy streams;
  OrderPolicy order;
};
inline constexpr PlanPolicies kExecutedPolicies[] = {
    {StreamPolicy::kOpara, OrderPolicy::kOpara},           {StreamPolicy::kOpara, OrderPolicy::kTopological},
    {StreamPolicy::kOparaUnhanded, OrderPolicy::kOpara},   {StreamPolicy::kNimble, OrderPolicy::kTopological},
    {StreamPolicy::kSingle, OrderPolicy::kTopological},    {StreamPolicy::kTrtllm, OrderPolicy::kTrtllm},
    {StreamPolicy::kTorchsched, OrderPolicy::kTopological}};

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
