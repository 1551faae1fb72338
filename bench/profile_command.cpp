#include "profile_command.h"

#include <c10/cuda/CUDAFunctions.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>

#include "csv_output.h"
#include "json_output.h"
#include "model_flags.h"
#include "model_loading.h"
#include "number_checks.h"
#include "opara/error.h"
#include "opara/model_profiler.h"
#include "progress.h"

namespace opara::bench {
namespace {

struct ProfileCommandOptions {
  std::string model;
  std::string dtype;  // --dtype: empty, as exported
  std::string out;
  std::string json;
  std::string csv;
  int runs = 5;
  int warmup = 3;
  std::string input_shape;
  std::optional<std::int64_t> batch;
  bool require_cupti = false;
};

constexpr std::size_t kBusiestNodes = 8;

void print_summary(std::FILE* table, const Profile& profile, const Graph& graph) {
  std::size_t kernels = 0;
  std::size_t with_kernels = 0;
  std::size_t compute = 0;
  for (const NodeProfile& node : profile.nodes) {
    kernels += node.kernels.size();
    with_kernels += !node.kernels.empty();
    compute += node.op_class == OpClass::kCompute;
  }
  const DeviceLimits& device = profile.device;
  fmt::print(table, "gpu        {}, {} SMs, compute capability {}.{}; torch {}, CUDA {} (driver {})\n", device.name,
             device.sm_count, device.compute_major, device.compute_minor, profile.torch_version,
             profile.cuda_runtime_version, profile.cuda_driver_version);
  if (profile.demand_source == "cupti") {
    fmt::print(
        table,
        "kernels    {} on {} nodes; {} ran outside every node; {} nodes expected to launch kernels showed none\n",
        kernels, with_kernels, profile.unattributed_kernels.size(), profile.silent_nodes.size());
    fmt::print(table,
               "runs       {} profiled after {} warm-up: eager {:.3f} ms, profiled {:.3f} ms, overhead {:.3f} ms\n",
               profile.runs, profile.warmup, profile.eager_run_ms, profile.profiled_run_ms,
               profile.profiled_run_ms - profile.eager_run_ms);
  } else {
    fmt::print(table, "demands    the static estimate: CUPTI was not available (see the note below)\n");
  }
  fmt::print(table, "classes    {} compute-bound, {} memory-bound\n", compute, profile.nodes.size() - compute);
  fmt::print(table, "copies     pinned host to device {:.1f} GB/s, device to host {:.1f} GB/s\n",
             profile.h2d_bytes_per_s / 1e9, profile.d2h_bytes_per_s / 1e9);

  std::vector<NodeId> busiest(profile.nodes.size());
  std::iota(busiest.begin(), busiest.end(), 0);
  std::stable_sort(busiest.begin(), busiest.end(),
                   [&](NodeId a, NodeId b) { return profile.nodes[a].gpu_ns > profile.nodes[b].gpu_ns; });
  busiest.resize(std::min(kBusiestNodes, busiest.size()));
  fmt::print(table, "\n{:>5}  {:<28} {:<8} {:>7} {:>9} {:>9} {:>8}\n", "node", "kind", "class", "demand", "gpu us",
             "cpu us", "kernels");
  for (NodeId id : busiest) {
    const NodeProfile& node = profile.nodes[id];
    fmt::print(table, "{:>5}  {:<28} {:<8} {:>7.3f} {:>9.1f} {:>9.1f} {:>8}\n", id, graph.node(id).kind,
               to_string(node.op_class), node.demand.demand, node.gpu_ns / 1e3, node.cpu_ns / 1e3, node.kernels.size());
  }
  for (const std::string& note : profile.notes) fmt::print(table, "\nnote       {}\n", note);
}

// --json: the figures of the summary; --csv: one row per node. The profile itself is --out.
void write_reports(const ProfileCommandOptions& options, const LoadedModel& model, const Profile& profile) {
  std::vector<nlohmann::json> rows;
  std::size_t kernels = 0;
  for (std::size_t id = 0; id < profile.nodes.size(); ++id) {
    const NodeProfile& node = profile.nodes[id];
    kernels += node.kernels.size();
    rows.push_back({{"node", id},
                    {"kind", model.graph.node(static_cast<NodeId>(id)).kind},
                    {"class", to_string(node.op_class)},
                    {"demand", node.demand.demand},
                    {"gpu_us", node.gpu_ns / 1e3},
                    {"cpu_us", node.cpu_ns / 1e3},
                    {"kernels", node.kernels.size()}});
  }
  if (!options.json.empty()) {
    write_json({{"model", model.path},
                {"nodes", profile.nodes.size()},
                {"profile", options.out},
                {"gpu", profile.device.name},
                {"demand_source", profile.demand_source},
                {"kernels", kernels},
                {"unattributed_kernels", profile.unattributed_kernels.size()},
                {"runs", profile.runs},
                {"eager_run_ms", profile.eager_run_ms},
                {"profiled_run_ms", profile.profiled_run_ms},
                {"h2d_gb_per_s", profile.h2d_bytes_per_s / 1e9},
                {"d2h_gb_per_s", profile.d2h_bytes_per_s / 1e9},
                {"notes", profile.notes}},
               options.json);
  }
  if (!options.csv.empty())
    write_csv(rows, {"node", "kind", "class", "demand", "gpu_us", "cpu_us", "kernels"}, options.csv);
}

void run_profile(const ProfileCommandOptions& options) {
  std::FILE* table = table_stream({{"--out", options.out}, {"--json", options.json}, {"--csv", options.csv}});
  if (!torch::cuda::is_available()) {
    throw Error(
        "profile: no CUDA GPU is visible on this machine, and a profile records the kernels of the GPU it describes; "
        "profile on the GPU machine, or plan and run here without --profile (the static estimate)");
  }
  const LoadedModel model = load_model(options.model, options.dtype);
  const RunInputs inputs = prepare_inputs(model, options.input_shape, std::nullopt, options.batch);
  ProfilerOptions profiler_options;
  profiler_options.runs = options.runs;
  profiler_options.warmup = options.warmup;
  profiler_options.require_cupti = options.require_cupti;
  Progress* bar = nullptr;  // set once the profiler knows how many runs it makes
  profiler_options.after_run = [&bar] {
    if (bar) bar->advance();
  };
  const ModelProfiler profiler(model.graph, c10::Device(c10::kCUDA, c10::cuda::current_device()), profiler_options);
  fmt::print(table, "model      {} ({} nodes)\ninputs     {}\n", model.path, model.graph.size(), inputs.origin);
  const Profile profile = [&] {
    Progress progress("profiling", static_cast<std::size_t>(profiler.total_runs()));
    bar = &progress;  // profile() is the only caller of after_run
    return profiler.profile(inputs.inputs);
  }();
  save_profile(profile, options.out);
  print_summary(table, profile, model.graph);
  fmt::print(table, "\nwrote      {}\n", options.out);
  write_reports(options, model, profile);
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto options = std::make_shared<ProfileCommandOptions>();
  CLI::App* profile = app.add_subcommand(
      "profile",
      "Record each node's kernels on the GPU (CUPTI) and write the profile that plan, run and compile read (GPU only)");
  add_model_flags(profile, options->model, options->dtype);
  profile->add_option("--out,-o", options->out, "where to write the profile (JSON)")->required();
  profile->add_option("--json", options->json, "also write the summary's figures as JSON ('-' for stdout)");
  profile->add_option("--csv", options->csv, "also write one row per node as CSV ('-' for stdout)");
  profile->add_option("--runs,-n", options->runs, "profiled runs; GPU times are their medians")->check(kPositive);
  profile->add_option("--warmup,-w", options->warmup, "plain eager runs first")->check(kNonNegative);
  profile->add_option("--input-shape", options->input_shape,
                      "inputs for a model without a sidecar JSON: SHAPE or NAME:SHAPE[:DTYPE],...");
  profile->add_option("--batch,-b", options->batch, "random inputs with this batch size")->check(kPositive);
  profile->add_flag("--require-cupti", options->require_cupti,
                    "fail when CUPTI is unavailable instead of writing the static estimate");
  profile->callback([options] { run_profile(*options); });
}

}  // namespace opara::bench
