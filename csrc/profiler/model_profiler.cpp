// ModelProfiler: one model on one GPU, node by node on the current stream, as the eager reference
// runs it (EagerExecutor, with a hook before each node and the observer after it):
//
//   host costs (CPU copies)  ->  warm-up  ->  plain runs (timed)  ->  profiled runs: push id, node,
//   pop id; synchronise; flush CUPTI; join records to nodes  ->  demands, classes, header
//
// Each profiled run is flushed and joined on its own, so every run gives each node a GPU time and
// the profile keeps the median; the kernels kept are the last run's (their resources do not change
// between runs, their durations barely do).
#include "opara/model_profiler.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "exec/eager_executor.h"
#include "exec/input_signature.h"
#include "exec/outputs.h"
#include "graph/op_table.h"
#include "profile/kernel_attribution.h"
#include "profile/kernel_demand.h"
#include "profile/op_class_refinement.h"
#include "profiler/copy_bandwidth.h"
#include "profiler/cupti_profiler.h"
#include "profiler/device_limits.h"
#include "profiler/host_costs.h"
#include "support/elapsed.h"

namespace opara {
namespace {

constexpr std::size_t kNamedInNotes = 5;  // how many kernels or nodes a note lists by name

double median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  const auto middle = samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2);
  std::nth_element(samples.begin(), middle, samples.end());
  return *middle;
}

std::string version_text(int version) {
  return fmt::format("{}.{}", version / 1000, version % 1000 / 10);
}

// Per node: whether any tensor it read or wrote lives on the GPU (an aten::Int of a CPU scalar
// has nothing to do there).
std::vector<bool> nodes_touching_the_device(EagerExecutor& executor, const std::vector<c10::IValue>& arguments,
                                            std::size_t node_count) {
  std::vector<bool> touches(node_count, false);
  executor.set_observer(
      [&](NodeId id, const std::vector<c10::IValue>& inputs, const std::vector<c10::IValue>& outputs) {
        for (const auto* values : {&inputs, &outputs}) {
          for (const at::Tensor& tensor : flatten_tensors(*values)) touches[id] = touches[id] || tensor.is_cuda();
        }
      });
  executor.run(arguments);
  executor.set_observer(nullptr);
  return touches;
}

double timed_run_ms(EagerExecutor& executor, const std::vector<c10::IValue>& arguments) {
  const auto started = std::chrono::steady_clock::now();
  executor.run(arguments);
  c10::cuda::device_synchronize();
  return milliseconds_since(started);
}

std::uint64_t device_ns(const std::vector<KernelRecord>& kernels, const std::vector<CopyRecord>& copies) {
  std::uint64_t total = 0;
  for (const KernelRecord& kernel : kernels) total += kernel.duration_ns();
  for (const CopyRecord& copy : copies) total += copy.duration_ns();
  return total;
}

// What the profiled runs found, across runs.
struct DeviceRecords {
  std::vector<std::vector<double>> gpu_ns;  // by node id, one sample per run
  Attribution last;                         // the last run's records
  std::vector<KernelRecord> unattributed_kernels;
  std::vector<CopyRecord> unattributed_copies;
  std::vector<NodeId> silent_nodes;
  std::vector<double> run_ms;
};

DeviceRecords profiled_runs(EagerExecutor& executor, const std::vector<c10::IValue>& arguments, CuptiProfiler& cupti,
                            const std::vector<bool>& expects, int runs, const std::function<void()>& after_run) {
  const std::size_t count = expects.size();
  DeviceRecords found;
  found.gpu_ns.resize(count);
  executor.set_before_node([&](NodeId id) { cupti.push(id); });
  executor.set_observer([&](NodeId, const auto&, const auto&) { cupti.pop(); });
  for (int run = 0; run < runs; ++run) {
    found.run_ms.push_back(timed_run_ms(executor, arguments));
    if (after_run) after_run();
    Attribution attribution = attribute_activities(cupti.take(), count, expects);
    for (std::size_t id = 0; id < count; ++id) {
      found.gpu_ns[id].push_back(static_cast<double>(device_ns(attribution.kernels[id], attribution.copies[id])));
    }
    auto append = [](auto& to, const auto& from) { to.insert(to.end(), from.begin(), from.end()); };
    append(found.unattributed_kernels, attribution.unattributed_kernels);
    append(found.unattributed_copies, attribution.unattributed_copies);
    for (NodeId silent : attribution.silent_nodes) {
      if (std::find(found.silent_nodes.begin(), found.silent_nodes.end(), silent) == found.silent_nodes.end()) {
        found.silent_nodes.push_back(silent);
      }
    }
    found.last = std::move(attribution);
  }
  executor.set_before_node(nullptr);
  executor.set_observer(nullptr);
  return found;
}

void add_notes(Profile& profile, const Graph& graph) {
  if (!profile.unattributed_kernels.empty() || !profile.unattributed_copies.empty()) {
    std::vector<std::string> names;
    for (const KernelRecord& kernel : profile.unattributed_kernels) {
      if (names.size() < kNamedInNotes) names.push_back(kernel.name);
    }
    profile.notes.push_back(fmt::format("{} kernels and {} copies ran outside every node{}{}",
                                        profile.unattributed_kernels.size(), profile.unattributed_copies.size(),
                                        names.empty() ? "" : ": ", fmt::join(names, ", ")));
  }
  if (!profile.silent_nodes.empty()) {
    std::vector<std::string> nodes;
    for (NodeId id : profile.silent_nodes) {
      if (nodes.size() < kNamedInNotes) nodes.push_back(graph.describe(id));
    }
    profile.notes.push_back(fmt::format("{} nodes expected to launch kernels showed no device work: {}{}",
                                        profile.silent_nodes.size(), fmt::join(nodes, "; "),
                                        profile.silent_nodes.size() > kNamedInNotes ? "; ..." : ""));
  }
}

NodeProfile host_entry(const Node& node, const HostCosts& host, const std::vector<bool>& expects) {
  NodeProfile entry;
  entry.id = node.id;
  entry.kind = node.kind;
  entry.cpu_ns = host.cpu_ns[node.id];
  entry.bytes_in = host.bytes_in[node.id];
  entry.bytes_out = host.bytes_out[node.id];
  entry.flops = host.flops[node.id];
  entry.expects_device_work = expects[node.id];
  return entry;
}

// The nodes from the host costs and what CUPTI recorded.
void add_device_records(Profile& profile, const Graph& graph, const HostCosts& host, const std::vector<bool>& expects,
                        DeviceRecords records) {
  profile.profiled_run_ms = median(records.run_ms);
  profile.unattributed_kernels = std::move(records.unattributed_kernels);
  profile.unattributed_copies = std::move(records.unattributed_copies);
  profile.silent_nodes = std::move(records.silent_nodes);
  std::vector<ClassEvidence> evidence;
  for (const Node& node : graph.nodes()) {
    NodeProfile& entry = profile.nodes.emplace_back(host_entry(node, host, expects));
    entry.kernels = std::move(records.last.kernels[node.id]);
    entry.copies = std::move(records.last.copies[node.id]);
    entry.gpu_ns = median(records.gpu_ns[node.id]);
    entry.demand = node_demand(entry.kernels, profile.device);
    evidence.push_back(ClassEvidence{op_traits(node.kind).compute_bound ? OpClass::kCompute : OpClass::kMemory,
                                     entry.flops, static_cast<double>(entry.bytes_in + entry.bytes_out), entry.gpu_ns});
  }
  const std::vector<OpClass> classes = refine_op_classes(evidence);
  for (NodeProfile& entry : profile.nodes) entry.op_class = classes[entry.id];
}

// The nodes from the host costs and the static estimate on their shapes: CUPTI was unavailable.
void add_static_estimate(Profile& profile, const Graph& graph, const HostCosts& host,
                         const std::vector<bool>& expects) {
  const std::vector<NodeCost> estimate = estimate_costs(graph, host.shapes);
  for (const Node& node : graph.nodes()) {
    NodeProfile& entry = profile.nodes.emplace_back(host_entry(node, host, expects));
    entry.op_class = estimate[node.id].op_class;
    entry.demand.demand = estimate[node.id].demand;
  }
}

Profile profile_header(const Graph& graph, c10::Device device, const std::vector<at::Tensor>& inputs,
                       const ProfilerOptions& options) {
  Profile profile;
  profile.device = device_limits(device.index());
  profile.torch_version = TORCH_VERSION;
  int runtime = 0;
  int driver = 0;
  C10_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  C10_CUDA_CHECK(cudaDriverGetVersion(&driver));
  profile.cuda_runtime_version = version_text(runtime);
  profile.cuda_driver_version = version_text(driver);
  profile.model_path = graph.source_path;
  if (!graph.source_path.empty() && std::filesystem::is_regular_file(graph.source_path)) {
    profile.model_hash = hash_model_file(graph.source_path);
    profile.model_structure = hash_graph_structure(graph);
  } else {
    profile.notes.push_back("the graph has no model file: the profile cannot be checked against one");
  }
  for (const at::Tensor& input : inputs) {
    profile.inputs.push_back(ProfileInput{input.sizes().vec(), c10::toString(input.scalar_type())});
  }
  profile.runs = options.runs;
  profile.warmup = std::max(1, options.warmup);  // the first run also finds the nodes that touch the GPU
  if (options.measure_copy_bandwidth) {
    const CopyBandwidth bandwidth = copy_bandwidth(device.index());
    profile.h2d_bytes_per_s = bandwidth.h2d_bytes_per_s;
    profile.d2h_bytes_per_s = bandwidth.d2h_bytes_per_s;
  }
  return profile;
}

}  // namespace

ModelProfiler::ModelProfiler(const Graph& graph, c10::Device device, ProfilerOptions options)
    : graph_(graph), device_(device), options_(options) {
  if (!device_.is_cuda()) {
    throw Error(
        fmt::format("{}: a profile records kernels on a CUDA GPU, not on {}; without a GPU, plan with the "
                    "static estimate (no profile)",
                    graph_.source_path, device_.str()));
  }
  if (!torch::cuda::is_available()) {
    throw Error(
        fmt::format("{}: profiling needs a CUDA GPU, and none is visible here; without one, plan with the "
                    "static estimate (no profile)",
                    graph_.source_path));
  }
  if (!device_.has_index()) device_ = c10::Device(c10::kCUDA, c10::cuda::current_device());
  if (options_.runs < 1 || options_.warmup < 0 || options_.host_runs < 1) {
    throw Error(
        fmt::format("profiler options: runs ({}) and host runs ({}) must be at least 1, warm-up ({}) at least 0",
                    options_.runs, options_.host_runs, options_.warmup));
  }
}

int ModelProfiler::total_runs() const {
  return options_.host_runs + std::max(1, options_.warmup) + 2 * options_.runs;
}

Profile ModelProfiler::profile(const std::vector<at::Tensor>& inputs) const {
  InputSignature{graph_, inputs};  // the count, and every input defined
  const std::size_t count = graph_.size();
  const auto after_run = [this] {
    if (options_.after_run) options_.after_run();
  };
  const HostCosts host = measure_host_costs(graph_, inputs, options_.host_runs, options_.after_run);

  c10::cuda::CUDAGuard guard(device_.index());
  Profile profile = profile_header(graph_, device_, inputs, options_);
  std::vector<c10::IValue> arguments;
  for (const at::Tensor& input : inputs) arguments.emplace_back(input.to(device_));
  EagerExecutor executor(graph_, device_);
  const std::vector<bool> touches = nodes_touching_the_device(executor, arguments, count);  // the first warm-up
  after_run();
  for (int run = 1; run < options_.warmup; ++run) {
    executor.run(arguments);
    after_run();
  }
  c10::cuda::device_synchronize();
  std::vector<double> plain_ms;
  for (int run = 0; run < options_.runs; ++run) {
    plain_ms.push_back(timed_run_ms(executor, arguments));
    after_run();
  }
  profile.eager_run_ms = median(plain_ms);

  std::vector<bool> expects(count, false);
  for (const Node& node : graph_.nodes()) {
    expects[node.id] = expects_device_work(node, touches[node.id], host.returns_only_aliases[node.id]);
  }
  std::optional<DeviceRecords> records;
  {
    std::optional<CuptiProfiler> cupti;
    try {
      cupti.emplace();
    } catch (const CuptiUnavailable& error) {
      if (options_.require_cupti) throw;
      profile.demand_source = "static estimate";
      profile.notes.push_back(
          fmt::format("no kernel records: {}; the demands and classes are the static estimate", error.what()));
      TORCH_WARN(graph_.source_path, ": ", profile.notes.back());
    }
    if (cupti) records = profiled_runs(executor, arguments, *cupti, expects, options_.runs, options_.after_run);
  }
  if (records) {
    add_device_records(profile, graph_, host, expects, std::move(*records));
  } else {
    add_static_estimate(profile, graph_, host, expects);
  }
  add_notes(profile, graph_);
  return profile;
}

}  // namespace opara
