#include "run_command.h"

#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/core/Device.h>
#include <c10/cuda/CUDAFunctions.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>

#include "csv_output.h"
#include "cuda_modes.h"
#include "exec/eager_executor.h"
#include "exec/outputs.h"
#include "json_output.h"
#include "model_flags.h"
#include "model_loading.h"
#include "modes.h"
#include "number_checks.h"
#include "opara/error.h"
#include "opara/options.h"
#include "opara/placement.h"
#include "overflow_flags.h"
#include "progress.h"
#include "runtime/cpu/cpu_parallel_executor.h"
#include "support/percentile.h"
#include "tuning/cpu_tuning.h"
#include "tuning/round_timing.h"

namespace opara::bench {
namespace {

// "NVIDIA H200 (cuda:0), torch 2.11.0, CUDA 13.0".
std::string device_description() {
  const cudaDeviceProp* properties = at::cuda::getCurrentDeviceProperties();
  return fmt::format("{} (cuda:{}), torch {}, CUDA {}.{}", properties->name, c10::cuda::current_device(), TORCH_VERSION,
                     CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
}

// "cpu (2 cores), torch 2.11.0": the CPU runs' header, as device_description() is the GPU's.
std::string cpu_description() {
  return fmt::format("cpu ({} cores), torch {}", usable_cores(), TORCH_VERSION);
}

constexpr int kDefaultCpuRounds = 5;
// Long enough for the previous mode's OpenMP threads to stop spinning (round_timing.h): the
// tuner's own settle.
const Settle kCpuSettle{1, CpuTuningOptions{}.settle};

struct RunOptions {
  std::string model;
  std::string dtype;  // --dtype: empty, as exported
  std::string device = "cpu";
  std::vector<std::string> modes{"eager"};
  std::optional<int> iters;        // default: 20 on the CPU, 1,000 on the GPU (as the paper)
  std::optional<int> warmup;       // default: 3 on the CPU, 10 on the GPU
  int rounds = kDefaultCpuRounds;  // the CPU: modes timed in interleaved rounds (round_timing.h)
  std::optional<std::int64_t> batch;
  std::string memory = "record-stream";
  std::string json;
  std::string csv;
  std::string input_shape;
  std::optional<std::uint64_t> seed;
  std::optional<int> max_streams;  // unset: tuned on the CPU; set: that cap, untuned
  // What every planned mode compiles with (--threads, --split-min-us, --tuning-ms, --profile,
  // --ridge, --allow-profile-mismatch, --alpha-us, --cpu-nodes); each mode sets its streams and
  // order, the cap, the device, the memory protection and the overflow policy.
  Options compile;
};

// --json: the whole report; --csv: a row per mode, the run's model and device in each.
void write_reports(const nlohmann::json& report, const RunOptions& options) {
  if (!options.json.empty()) write_json(report, options.json);
  if (options.csv.empty()) return;
  std::vector<nlohmann::json> rows;
  for (nlohmann::json row : report.at("modes")) {
    row["model"] = report.at("model");
    row["device"] = report.at("device");
    rows.push_back(std::move(row));
  }
  write_csv(rows, {"model", "device", "mode", "median_ms", "speedup_vs_sequential", "speedup_vs_eager"}, options.csv);
}

using Runner = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

std::vector<double> time_runs(const Runner& runner, const std::vector<at::Tensor>& inputs, int iters,
                              const c10::Device& device, std::vector<at::Tensor>* outputs = nullptr,
                              Progress* progress = nullptr) {
  std::vector<double> samples;
  for (int i = 0; i < iters; ++i) {
    if (progress) progress->advance();
    const auto started = std::chrono::steady_clock::now();
    auto result = runner(inputs);
    if (device.is_cuda()) torch::cuda::synchronize();
    samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
    if (outputs) *outputs = std::move(result);
  }
  return samples;
}

void run_modes(const RunOptions& options) {
  std::FILE* table = table_stream({{"--json", options.json}, {"--csv", options.csv}});
  reject_repeated_modes(options.modes);
  const c10::Device device(options.device);
  for (const std::string& mode : options.modes) {
    if (mode != kOverflowMode) {
      mode_spec(mode);
    } else if (!device.is_cuda()) {
      throw Error(fmt::format("mode {} needs --device cuda: on the CPU every node runs on the CPU already", mode));
    }
  }
  if (device.is_cuda() && !torch::cuda::is_available()) {
    throw Error("--device cuda: no CUDA GPU is visible on this machine; use --device cpu");
  }
  const LoadedModel model = load_model(options.model, options.dtype);
  const RunInputs inputs = prepare_inputs(model, options.input_shape, options.seed, options.batch);
  const int iters = options.iters.value_or(device.is_cuda() ? 1000 : 20);
  const int warmup = options.warmup.value_or(device.is_cuda() ? 10 : 3);
  fmt::print(table, "model   {} ({} nodes, {}, imported in {:.1f} ms)\n", model.path, model.graph.size(), model.dtype,
             model.import_ms);
  fmt::print(table, "device  {}\ninputs  {}\n", device.is_cuda() ? device.str() : cpu_description(), inputs.origin);
  if (device.is_cuda()) {
    CudaRunRequest request;
    request.modes = options.modes;
    request.inputs = inputs.inputs;
    request.iters = iters;
    request.warmup = warmup;
    request.options = options.compile;
    request.options.plan.max_streams = options.max_streams.value_or(0);
    request.options.cuda.memory =
        options_from_text({{"memory", options.memory}}).cuda.memory;  // one table of the names
    nlohmann::json report = {
        {"model", model.path}, {"dtype", model.dtype}, {"device", device_description()}, {"import_ms", model.import_ms},
        {"iters", iters},      {"warmup", warmup},     {"inputs", inputs.origin},        {"memory", options.memory}};
    // PyTorch's defaults, as every mode runs them: cuDNN convolutions may use TF32, cuBLAS not.
    report["tf32_cudnn"] = at::globalContext().allowTF32CuDNN();
    report["tf32_cublas"] = at::globalContext().allowTF32CuBLAS();
    fmt::print(table, "gpu     {}\ntf32    cuDNN {}, cuBLAS {}\n", report["device"].get<std::string>(),
               report["tf32_cudnn"].get<bool>() ? "on" : "off", report["tf32_cublas"].get<bool>() ? "on" : "off");
    report["modes"] = run_cuda_modes(model, request, table);
    write_reports(report, options);
    return;
  }
  if (!torch::cuda::is_available()) {
    fmt::print(table, "note    no GPU here: the CUDA graph modes need a GPU; planned modes run on CPU workers\n");
  }
  fmt::print(table, "\n{:<15} {:>10} {:>10} {:>8} {:>8} {:>14} {:>8}  {}\n", "mode", "median ms", "p90 ms", "vs seq",
             "vs eager", "max |diff|", "bitwise", "schedule");

  nlohmann::json report = {{"model", model.path},       {"dtype", model.dtype},         {"device", device.str()},
                           {"host", cpu_description()}, {"import_ms", model.import_ms}, {"iters", iters},
                           {"warmup", warmup},          {"inputs", inputs.origin}};
  // Every mode is set up and warmed up first (round-robin), so that the first mode timed does not
  // also pay for warming the process up; then each mode is timed in one block: interleaving single
  // runs would let one mode's idle OpenMP threads, still spinning, slow the next mode down.
  struct ModeRun {
    std::string name;
    Runner runner;
    nlohmann::json entry;
    std::string schedule = "node by node, one thread pool";
    std::shared_ptr<EagerExecutor> eager;
    std::optional<CompiledModel> compiled;
    std::vector<double> samples;
    std::vector<at::Tensor> outputs;
  };
  std::vector<ModeRun> runs;
  for (const std::string& mode_name : options.modes) {
    const ModeSpec& mode = mode_spec(mode_name);
    ModeRun& run = runs.emplace_back();
    run.name = mode_name;
    run.entry = {{"mode", mode_name}};
    if (!mode.planned) {
      run.eager = std::make_shared<EagerExecutor>(model.graph, device);
      run.runner = [eager = run.eager](const std::vector<at::Tensor>& in) {
        return flatten_tensors(eager->run(std::vector<c10::IValue>(in.begin(), in.end())));
      };
      continue;
    }
    // As a user compiles for the CPU: compile() plans, and tunes the cap and threads unless
    // --max-streams or --threads fixes them.
    Options compile_options = options.compile;
    compile_options.device = device;
    compile_options.plan = mode.plan;
    compile_options.overflow = {};  // opara+overflow is the GPU's
    if (options.max_streams) {
      compile_options.plan.max_streams = *options.max_streams;
      compile_options.cpu.tuning_ms = 0;
    }
    {
      const Progress compiling(fmt::format("compiling {}", mode_name), 1);
      run.compiled = compile(model.graph, inputs.inputs, compile_options);
    }
    const CompiledStats stats = run.compiled->stats();
    const Plan& plan = run.compiled->plan();
    PlanOptions uncapped_options = mode.plan;
    uncapped_options.max_streams = 0;
    const Plan uncapped = make_plan(model.graph, uncapped_options);  // the stream count needs no costs
    const bool tuned = !stats.tuning.empty();
    const bool searched = tuned && stats.tuning[stats.tuning_chosen].searched_priorities;
    run.schedule = fmt::format("{} of {} streams x {} threads, {} events{}", plan.stream_count, uncapped.stream_count,
                               stats.intra_op_threads, plan.wait_count(),
                               !tuned     ? ""
                               : searched ? " (cap tuned, priorities searched)"
                                          : " (cap tuned)");
    run.runner = [model = *run.compiled](const std::vector<at::Tensor>& in) { return model.run(in); };
    const nlohmann::json stats_json = nlohmann::json::parse(to_json(stats));
    run.entry["streams"] = plan.stream_count;
    run.entry["streams_uncapped"] = uncapped.stream_count;
    run.entry["events"] = plan.wait_count();
    run.entry["intra_op_threads"] = stats.intra_op_threads;
    run.entry["plan_us"] = stats.plan_us;
    run.entry["cost_source"] = plan.cost_source;
    run.entry["stream_policy"] = to_string(plan.stream_policy);
    run.entry["order_policy"] = to_string(plan.order_policy);
    run.entry["tuned"] = tuned;
    run.entry["priorities"] = searched ? "searched" : "critical-path";
    if (tuned) run.entry["tuning"] = stats_json.at("tuning");
  }
  for (int i = 0; i < warmup; ++i) {
    for (ModeRun& run : runs) time_runs(run.runner, inputs.inputs, 1, device, &run.outputs);
  }
  std::vector<BlockTimer> timers;
  for (ModeRun& run : runs) {
    timers.push_back([&run, &inputs, &device](int count) {
      return time_runs(run.runner, inputs.inputs, count, device, &run.outputs);
    });
  }
  RoundTimes times;
  {
    Progress progress("timing", runs.size() * static_cast<std::size_t>(iters));
    times = time_in_rounds(timers, options.rounds, iters, {2, kCpuSettle.at_least},
                           [&progress](int count) { progress.advance(static_cast<std::size_t>(count)); });
  }
  const int rounds = static_cast<int>(times.samples.front().size());
  report["rounds"] = rounds;

  // Speedups against the sequential and eager modes of this run, when they ran: the median over
  // rounds of the ratio within a round.
  std::optional<std::size_t> sequential_index;
  std::optional<std::size_t> eager_index;
  for (std::size_t k = 0; k < runs.size(); ++k) {
    runs[k].samples = times.all(k);
    if (runs[k].name == "sequential") sequential_index = k;
    if (runs[k].name == "eager") eager_index = k;
  }
  auto speedup = [&times](std::optional<std::size_t> baseline, std::size_t k) {
    return baseline ? std::optional<double>(times.speedup(k, *baseline)) : std::nullopt;
  };
  auto ratio_text = [](std::optional<double> ratio) { return ratio ? fmt::format("{:.2f}x", *ratio) : "n/a"; };
  auto ratio_json = [](std::optional<double> ratio) {
    return ratio ? nlohmann::json(*ratio) : nlohmann::json(nullptr);
  };

  std::string footnote;
  std::vector<std::string> wrong;  // modes whose outputs are not the reference's, nor eager's at their thread count
  for (std::size_t k = 0; k < runs.size(); ++k) {
    ModeRun& run = runs[k];
    std::optional<double> difference;
    std::optional<bool> identical;
    if (inputs.expected) {
      try {
        difference = max_abs_difference(run.outputs, *inputs.expected);
      } catch (const Error& error) {  // another count or shape of outputs
        throw Error(
            fmt::format("{}: {} does not give the expected outputs ({}): {}. If the reference is stale or "
                        "another model's, export the model again (scripts/export_models.py)",
                        model.path, run.name, inputs.origin, error.what()));
      }
      identical = bitwise_equal(run.outputs, *inputs.expected);
    }
    // ATen splits a reduction by the intra-op thread count, so a worker with fewer threads than
    // the reference had may differ in the last bits; it must then equal eager at its own count.
    std::optional<bool> identical_same_threads;
    const int worker_threads = run.compiled ? run.compiled->stats().intra_op_threads : 0;
    if (identical && !*identical && run.compiled && worker_threads != at::get_num_threads()) {
      const int previous = at::get_num_threads();
      at::set_num_threads(worker_threads);
      EagerExecutor same_threads(model.graph, device);
      identical_same_threads = bitwise_equal(
          run.outputs,
          flatten_tensors(same_threads.run(std::vector<c10::IValue>(inputs.inputs.begin(), inputs.inputs.end()))));
      at::set_num_threads(previous);
      footnote = fmt::format(
          "* equal bit for bit to eager run with the same {} intra-op thread(s): ATen splits reductions by the "
          "thread count, and the reference ran with {}",
          worker_threads, previous);
    }
    const double median = percentile(run.samples, 0.5);
    const double p90 = percentile(run.samples, 0.9);
    std::string bitwise = identical ? (*identical ? "yes" : "no") : "n/a";
    if (identical_same_threads) bitwise = *identical_same_threads ? "no*" : "NO";
    if (identical && !*identical && !identical_same_threads.value_or(false)) wrong.push_back(run.name);
    const std::optional<double> vs_sequential = speedup(sequential_index, k);
    const std::optional<double> vs_eager = speedup(eager_index, k);
    fmt::print(table, "{:<15} {:>10.3f} {:>10.3f} {:>8} {:>8} {:>14} {:>8}  {}\n", run.name, median, p90,
               ratio_text(vs_sequential), ratio_text(vs_eager), difference ? fmt::format("{:.3g}", *difference) : "n/a",
               bitwise, run.schedule);
    nlohmann::json& entry = run.entry;
    entry["median_ms"] = median;
    entry["p90_ms"] = p90;
    entry["samples_ms"] = run.samples;  // every timed run, round after round
    entry["speedup_vs_sequential"] = ratio_json(vs_sequential);
    entry["speedup_vs_eager"] = ratio_json(vs_eager);
    if (eager_index) entry["speedup_vs_eager_by_round"] = times.speedups(k, *eager_index);
    if (run.eager) entry["peak_live_values"] = run.eager->peak_live_values();
    entry["max_abs_diff"] = difference ? nlohmann::json(*difference) : nlohmann::json(nullptr);
    entry["bitwise_equal"] = identical ? nlohmann::json(*identical) : nlohmann::json(nullptr);
    if (identical_same_threads) entry["bitwise_equal_eager_same_threads"] = *identical_same_threads;
    report["modes"].push_back(entry);
  }
  fmt::print(table,
             "\ntimed in {} interleaved round(s) of about {} runs per mode; a speedup is the median over rounds "
             "of the ratio within a round\n",
             rounds, iters / rounds);
  if (!footnote.empty()) fmt::print(table, "\n{}\n", footnote);
  write_reports(report, options);
  if (!wrong.empty()) {
    const bool eager_too = std::find(wrong.begin(), wrong.end(), "eager") != wrong.end();
    std::string why;
    const std::optional<int> reference_threads = model.spec ? model.spec->intra_op_threads : std::nullopt;
    if (eager_too && reference_threads && *reference_threads != at::get_num_threads()) {
      why = fmt::format(
          ". Eager itself differs: the reference was made with {} intra-op threads and this run has {} "
          "(reductions split their work by the thread count); run with OMP_NUM_THREADS={}, or export the model "
          "again here (scripts/export_models.py)",
          *reference_threads, at::get_num_threads(), *reference_threads);
    } else if (eager_too) {
      why =
          ". Eager itself differs, so the reference may be stale or another model's: export the model again "
          "(scripts/export_models.py)";
    }
    throw Error(fmt::format("{}: the outputs of {} are not the expected ones ({}; see max |diff|){}", model.path,
                            fmt::join(wrong, ", "), inputs.origin, why));
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand("run", "Time a model under each execution mode and check its outputs");
  add_model_flags(run, options->model, options->dtype);
  run->add_option("--device", options->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  run->add_option("--modes", options->modes,
                  "comma-separated execution modes: eager, sequential, nimble, opara, opara-noreorder, and on "
                  "the GPU opara+overflow")
      ->delimiter(',');
  run->add_option("--iters,-n", options->iters, "timed iterations (default: 20 on the CPU, 1000 on the GPU)")
      ->check(kPositive);
  run->add_option("--warmup,-w", options->warmup, "untimed iterations first (default: 3 on the CPU, 10 on the GPU)")
      ->check(kNonNegative);
  CLI::Option* rounds =
      run->add_option("--rounds", options->rounds,
                      fmt::format("the CPU: time the modes in this many interleaved rounds and take each speedup "
                                  "within a round, so that the machine's drift cancels out (default {}; 1: one "
                                  "block per mode)",
                                  kDefaultCpuRounds))
          ->check(kPositive);
  run->add_option("--batch,-b", options->batch,
                  "random inputs with this batch size (the sidecar's shapes with the first dimension replaced)")
      ->check(kPositive);
  run->add_option("--memory", options->memory,
                  "CUDA graphs: how tensors read on other streams are protected during capture (smaller-pool: "
                  "capture with both, keep the smaller pool)")
      ->check(CLI::IsMember({"record-stream", "keep-alive", "smaller-pool"}));
  run->add_option("--json", options->json, "also write the results as JSON to this file ('-' for stdout)");
  run->add_option("--csv", options->csv, "also write one row per mode as CSV to this file ('-' for stdout)");
  run->add_option("--input-shape", options->input_shape,
                  "inputs for a model without a sidecar JSON: SHAPE or NAME:SHAPE[:DTYPE],... (1x3x224x224)");
  run->add_option("--seed", options->seed, "random inputs from this seed instead of the reference inputs")
      ->check(kNonNegative);  // a uint64 option would take -1 as 2^64 - 1
  run->add_option("--max-streams", options->max_streams,
                  "planned modes: merge streams past this many (0: no cap); default: tuned on the CPU")
      ->check(kNonNegative);
  run->add_option("--threads", options->compile.cpu.intra_op_threads,
                  "planned modes on the CPU: intra-op threads per worker (0: cores / streams, or tuned)")
      ->check(kNonNegative)
      ->check(number_at_most(usable_cores(), "the cores here"));
  run->add_option("--split-min-us", options->compile.cpu.split_min_us,
                  "planned modes on the CPU: split a pooling or activation node among idle workers when it took at "
                  "least this long (0: never)")
      ->check(kNonNegative);
  run->add_option("--tuning-ms", options->compile.cpu.tuning_ms,
                  "planned modes on the CPU, with neither --max-streams nor --threads: about how long compile() "
                  "times the candidate schedules (default 1000; 0: every stream the plan opens, untimed)")
      ->check(kNonNegative);
  run->add_option("--profile", options->compile.costs.profile, "resource demands from a recorded profile (JSON)")
      ->check(CLI::ExistingFile);
  run->add_flag("--allow-profile-mismatch", options->compile.costs.allow_profile_mismatch,
                "use a profile made for another model file, GPU or input shapes, with a warning");
  run->add_option("--ridge", options->compile.costs.ridge_point,
                  "FLOPs per byte above which an op counts as compute-bound")
      ->check(kPositive);
  // opara+overflow's default: SIR+'s Comm+SD.
  options->compile.overflow.policy = OverflowPolicy::kCommSd;
  const OverflowFlags overflow = add_overflow_flags(run, options->compile.overflow,
                                                    "opara+overflow: which nodes run on the CPU: comm_sd (SIR+ "
                                                    "Comm+SD, needs --profile; the default), manual (--cpu-nodes) or "
                                                    "none");
  run->callback([options, overflow, rounds] {
    if (options->device == "cuda" && rounds->count() > 0) {
      throw CLI::ValidationError("--rounds",
                                 "times CPU runs only: on the GPU each mode is timed with CUDA events "
                                 "in one block, then its peak memory is read");
    }
    const bool overflow_mode =
        std::find(options->modes.begin(), options->modes.end(), kOverflowMode) != options->modes.end();
    if (!overflow_mode &&
        (overflow.policy->count() > 0 || overflow.alpha_us->count() > 0 || overflow.cpu_nodes->count() > 0)) {
      throw CLI::ValidationError("--overflow/--alpha-us/--cpu-nodes", "only go with --modes ...,opara+overflow");
    }
    if (overflow_mode) check_overflow_flags(options->compile.overflow, options->compile.costs.profile);
    run_modes(*options);
  });
}

}  // namespace opara::bench
