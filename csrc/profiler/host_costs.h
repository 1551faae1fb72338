#pragma once

// What each node costs on the host, and whether it must show device work: the model profiler's
// and model_costs()'s internals, not part of the public API.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "opara/graph.h"
#include "opara/plan.h"

namespace opara {

// What each node costs on the host, measured on CPU copies of the inputs: the part of a profile
// that needs no GPU.
struct HostCosts {
  std::vector<double> cpu_ns;                // by node id: median time of the node's own run
  std::vector<NodeShapes> shapes;            // by node id: arguments (weights included) and results
  std::vector<std::int64_t> bytes_in;        // by node id: bytes of every tensor argument
  std::vector<std::int64_t> bytes_out;       // by node id: bytes of every tensor result
  std::vector<std::optional<double>> flops;  // by node id: dense_flops(), where known
  // By node id: it returned at least one tensor and only views of its arguments (a reshape that
  // could view, a to() that had nothing to do, dropout in eval mode): no copy was made.
  std::vector<bool> returns_only_aliases;
};

// Runs `graph` `runs` times (at least once) node by node on the CPU, on CPU copies of `inputs`,
// timing each node's run alone; `after_run`, when set, is called after each run. Throws
// opara::Error naming the node that fails.
HostCosts measure_host_costs(const Graph& graph, const std::vector<at::Tensor>& inputs, int runs,
                             const std::function<void()>& after_run = {});

// Whether the profiler must find a kernel or a copy for `node`: the graph says it launches kernels
// (an estimate), it read or wrote a tensor on the GPU, and it either wrote an input in place or
// returned something other than views of its arguments. A flatten that could view, dropout in eval
// mode, an aten::Int of a CPU scalar or an aten::empty (allocation alone) do nothing on the device,
// and are not reported as silent.
bool expects_device_work(const Node& node, bool touches_device, bool returns_only_aliases);

}  // namespace opara
