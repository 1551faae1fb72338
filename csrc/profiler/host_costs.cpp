// The host side of a profile: each node run on the CPU, on CPU copies of its inputs, timed alone
// (CPU-overflow placement compares this with the node's GPU time plus its copies), with the bytes
// it reads and writes and whether it copied anything at all. Runs on any machine.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>

#include "exec/eager_executor.h"
#include "exec/node_shapes.h"
#include "exec/outputs.h"
#include "graph/op_table.h"
#include "opara/model_profiler.h"
#include "profiler/host_costs.h"

namespace opara {
namespace {

double median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  const auto middle = samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2);
  std::nth_element(samples.begin(), middle, samples.end());
  return *middle;
}

std::int64_t total_bytes(const std::vector<TensorShape>& tensors) {
  std::int64_t bytes = 0;
  for (const TensorShape& tensor : tensors) bytes += tensor.bytes();
  return bytes;
}

bool returns_only_aliases(const std::vector<c10::IValue>& arguments, const std::vector<c10::IValue>& outputs) {
  const std::vector<at::Tensor> results = flatten_tensors(outputs);
  if (results.empty()) return false;
  const std::vector<at::Tensor> read = flatten_tensors(arguments);
  return std::all_of(results.begin(), results.end(), [&](const at::Tensor& result) {
    return result.defined() && result.has_storage() &&
           std::any_of(read.begin(), read.end(), [&](const at::Tensor& argument) {
             return argument.defined() && argument.has_storage() && argument.storage().is_alias_of(result.storage());
           });
  });
}

}  // namespace

bool expects_device_work(const Node& node, bool touches_device, bool returns_only_aliases) {
  return node.has(kLaunchesKernel) && !op_traits(node.kind).allocates_only && touches_device &&
         (node.has(kWritesInput) || !returns_only_aliases);
}

HostCosts measure_host_costs(const Graph& graph, const std::vector<at::Tensor>& inputs, int runs,
                             const std::function<void()>& after_run) {
  const std::size_t count = graph.size();
  HostCosts costs;
  costs.shapes.resize(count);
  costs.bytes_in.assign(count, 0);
  costs.bytes_out.assign(count, 0);
  costs.flops.assign(count, std::nullopt);
  costs.returns_only_aliases.assign(count, false);
  std::vector<std::vector<double>> samples(count);

  EagerExecutor executor(graph, c10::kCPU);
  std::vector<c10::IValue> cpu_inputs;
  for (const at::Tensor& input : inputs) cpu_inputs.emplace_back(input.cpu());
  std::chrono::steady_clock::time_point started;
  bool first_run = true;
  executor.set_before_node([&](NodeId) { started = std::chrono::steady_clock::now(); });
  executor.set_observer([&](NodeId id, const std::vector<c10::IValue>& node_inputs,
                            const std::vector<c10::IValue>& outputs) {
    samples[id].push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - started).count());
    if (!first_run) return;
    const NodeOp& op = *graph.node(id).op;  // the executor runs the graph's own op on the CPU
    costs.shapes[id] = node_shapes(op, node_inputs, outputs);
    for (const auto& argument : costs.shapes[id].arguments) costs.bytes_in[id] += total_bytes(argument);
    costs.bytes_out[id] = total_bytes(costs.shapes[id].outputs);
    costs.flops[id] = dense_flops(graph.node(id).kind, costs.shapes[id]);
    costs.returns_only_aliases[id] = returns_only_aliases(op.call_arguments(node_inputs), outputs);
  });
  for (int run = 0; run < std::max(runs, 1); ++run) {
    executor.run(cpu_inputs);
    first_run = false;
    if (after_run) after_run();
  }
  costs.cpu_ns.resize(count);
  for (std::size_t id = 0; id < count; ++id) costs.cpu_ns[id] = median(samples[id]);
  return costs;
}

}  // namespace opara
