#include "run_command.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/core/Device.h>
#include <c10/cuda/CUDAFunctions.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "cpu_modes.h"
#include "csv_output.h"
#include "cuda_modes.h"
#include "memory_budget_flag.h"
#include "model_flags.h"
#include "model_loading.h"
#include "modes.h"
#include "number_checks.h"
#include "opara/error.h"
#include "opara/options.h"
#include "opara/version.h"
#include "overflow_flags.h"
#include "run_report.h"
#include "runtime/cpu/cpu_parallel_executor.h"

namespace opara::bench {
namespace {

// "NVIDIA H200 (cuda:0), torch 2.11.0, CUDA 13.0": the torch running (version.h).
std::string device_description() {
  const cudaDeviceProp* properties = at::cuda::getCurrentDeviceProperties();
  return fmt::format("{} (cuda:{}), torch {}, CUDA {}.{}", properties->name, c10::cuda::current_device(),
                     version().torch_running, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
}

// "cpu (2 cores), torch 2.11.0": the CPU runs' header, as device_description() is the GPU's.
std::string cpu_description() {
  return fmt::format("cpu ({} cores), torch {}", usable_cores(), version().torch_running);
}

constexpr int kDefaultCpuRounds = 5;

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
  std::string memory_budget = kDefaultMemoryBudget;  // CudaOptions::memory_budget, as options_from_text takes it
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

// Usage errors that need the device, before anything loads.
void check_modes(const RunOptions& options, const c10::Device& device) {
  reject_repeated_modes(options.modes);
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
}

// The JSON's top level both devices write.
nlohmann::json report_header(const LoadedModel& model, const RunInputs& inputs, const std::string& device, int iters,
                             int warmup) {
  const VersionInfo versions = version();
  return {{"model", model.path},
          {"dtype", model.dtype},
          {"device", device},
          {"import_ms", model.import_ms},
          {"iters", iters},
          {"warmup", warmup},
          {"inputs", inputs.origin},
          {"opara", versions.opara},
          {"torch_built", versions.torch_built},
          {"torch_running", versions.torch_running}};
}

MeasuredModes run_on_gpu(const RunOptions& options, const LoadedModel& model, const RunInputs& inputs,
                         nlohmann::json& header, std::FILE* table) {
  CudaRunRequest request;
  request.modes = options.modes;
  request.inputs = inputs.inputs;
  request.iters = header.at("iters").get<int>();
  request.warmup = header.at("warmup").get<int>();
  request.options = options.compile;
  request.options.plan.max_streams = options.max_streams.value_or(0);
  // One table of the names and one parser of the budget: the library's.
  const Options named = options_from_text({{"memory", options.memory}, {"memory_budget", options.memory_budget}});
  request.options.cuda.memory = named.cuda.memory;
  request.options.cuda.memory_budget = named.cuda.memory_budget;
  header["memory"] = options.memory;
  // PyTorch's defaults, as every mode runs them: cuDNN convolutions may use TF32, cuBLAS not.
  header["tf32_cudnn"] = at::globalContext().allowTF32CuDNN();
  header["tf32_cublas"] = at::globalContext().allowTF32CuBLAS();
  fmt::print(table, "gpu     {}\ntf32    cuDNN {}, cuBLAS {}\n", header["device"].get<std::string>(),
             header["tf32_cudnn"].get<bool>() ? "on" : "off", header["tf32_cublas"].get<bool>() ? "on" : "off");
  return run_cuda_modes(model, request);
}

MeasuredModes run_on_cpu(const RunOptions& options, const LoadedModel& model, const RunInputs& inputs,
                         nlohmann::json& header, std::FILE* table) {
  if (!torch::cuda::is_available()) {
    fmt::print(table, "note    no GPU here: the CUDA graph modes need a GPU; planned modes run on CPU workers\n");
  }
  header["host"] = cpu_description();
  CpuRunRequest request;
  request.modes = options.modes;
  request.iters = header.at("iters").get<int>();
  request.warmup = header.at("warmup").get<int>();
  request.rounds = options.rounds;
  request.max_streams = options.max_streams;
  request.options = options.compile;
  return run_cpu_modes(model, inputs, request);
}

void run_modes(const RunOptions& options) {
  std::FILE* table = table_stream({{"--json", options.json}, {"--csv", options.csv}});
  const c10::Device device(options.device);
  check_modes(options, device);
  const LoadedModel model = load_model(options.model, options.dtype);
  const RunInputs inputs = prepare_inputs(model, options.input_shape, options.seed, options.batch);
  const int iters = options.iters.value_or(device.is_cuda() ? 1000 : 20);
  const int warmup = options.warmup.value_or(device.is_cuda() ? 10 : 3);
  fmt::print(table, "model   {} ({} nodes, {}, imported in {:.1f} ms)\n", model.path, model.graph.size(), model.dtype,
             model.import_ms);
  fmt::print(table, "device  {}\ninputs  {}\nbuild   {}\n", device.is_cuda() ? device.str() : cpu_description(),
             inputs.origin, to_string(version()));
  nlohmann::json header =
      report_header(model, inputs, device.is_cuda() ? device_description() : device.str(), iters, warmup);
  const MeasuredModes measured = device.is_cuda() ? run_on_gpu(options, model, inputs, header, table)
                                                  : run_on_cpu(options, model, inputs, header, table);
  print_modes_table(table, measured);
  write_reports(report_json(header, measured), options.json, options.csv);
  // On the CPU every mode must give the reference's outputs; the GPU's differ from the CPU's.
  if (!device.is_cuda()) fail_on_wrong_outputs(model, inputs, measured.modes);
}

}  // namespace

namespace {

void add_timing_flags(CLI::App* run, RunOptions& options) {
  run->add_option("--device", options.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  run->add_option("--modes", options.modes,
                  "comma-separated execution modes: eager, sequential, nimble, opara, opara-noreorder, trtllm, "
                  "torchsched, and on "
                  "the GPU opara+overflow")
      ->delimiter(',');
  run->add_option("--iters,-n", options.iters, "timed iterations (default: 20 on the CPU, 1000 on the GPU)")
      ->check(kPositive);
  run->add_option("--warmup,-w", options.warmup, "untimed iterations first (default: 3 on the CPU, 10 on the GPU)")
      ->check(kNonNegative);
}

CLI::Option* add_rounds_flag(CLI::App* run, RunOptions& options) {
  return run
      ->add_option("--rounds", options.rounds,
                   fmt::format("the CPU: time the modes in this many interleaved rounds and take each speedup within "
                               "a round, so that the machine's drift cancels out (default {}; 1: one block per mode)",
                               kDefaultCpuRounds))
      ->check(kPositive);
}

// --batch, --memory, --json, --csv, --input-shape, --seed.
void add_input_and_report_flags(CLI::App* run, RunOptions& options) {
  run->add_option("--batch,-b", options.batch,
                  "random inputs with this batch size (the sidecar's shapes with the first dimension replaced)")
      ->check(kPositive);
  run->add_option("--memory", options.memory,
                  "CUDA graphs: how tensors read on other streams are protected during capture (smaller-pool: "
                  "capture with both, keep the smaller pool)")
      ->check(CLI::IsMember({"record-stream", "keep-alive", "smaller-pool"}));
  run->add_option("--json", options.json, "also write the results as JSON to this file ('-' for stdout)");
  run->add_option("--csv", options.csv, "also write one row per mode as CSV to this file ('-' for stdout)");
  run->add_option("--input-shape", options.input_shape,
                  "inputs for a model without a sidecar JSON: SHAPE or NAME:SHAPE[:DTYPE],... (1x3x224x224)");
  run->add_option("--seed", options.seed, "random inputs from this seed instead of the reference inputs")
      ->check(kNonNegative);  // a uint64 option would take -1 as 2^64 - 1
}

void add_planning_flags(CLI::App* run, RunOptions& options) {
  run->add_option("--max-streams", options.max_streams,
                  "planned modes: merge streams past this many (0: no cap); default: tuned on the CPU")
      ->check(kNonNegative);
  run->add_option("--threads", options.compile.cpu.intra_op_threads,
                  "planned modes on the CPU: intra-op threads per worker (0: cores / streams, or tuned)")
      ->check(kNonNegative)
      ->check(number_at_most(usable_cores(), "the cores here"));
  run->add_option("--split-min-us", options.compile.cpu.split_min_us,
                  "planned modes on the CPU: split a pooling or activation node among idle workers when it took at "
                  "least this long (0: never)")
      ->check(kNonNegative);
  run->add_option("--tuning-ms", options.compile.cpu.tuning_ms,
                  "planned modes on the CPU, with neither --max-streams nor --threads: about how long compile() "
                  "times the candidate schedules (default 1000; 0: every stream the plan opens, untimed)")
      ->check(kNonNegative);
  run->add_option("--measure-ms", options.compile.cuda.measure_ms,
                  "planned modes on the GPU, without --max-streams: about how long compile() times the captured "
                  "candidates (one stream, a cap, the plan) before keeping one (default 200; 0: the plan, unmeasured)")
      ->check(kNonNegative);
  run->add_option("--memory-budget", options.memory_budget,
                  "planned modes on the GPU: the most the graphs' pool may take (the plan's streams are capped until "
                  "its estimate fits, a measured candidate over it is dropped), a ratio to the sequential graph's "
                  "('1.3x', the default) or a size ('512MiB')")
      ->check(memory_budget_check());
  run->add_option("--profile", options.compile.costs.profile, "resource demands from a recorded profile (JSON)")
      ->check(CLI::ExistingFile);
  run->add_flag("--allow-profile-mismatch", options.compile.costs.allow_profile_mismatch,
                "use a profile made for another model file, GPU or input shapes, with a warning");
  run->add_option("--ridge", options.compile.costs.ridge_point,
                  "FLOPs per byte above which an op counts as compute-bound")
      ->check(kPositive);
}

// Flags that only go with the device or modes they change.
void check_flag_combinations(const RunOptions& options, const OverflowFlags& overflow, const CLI::Option* rounds) {
  if (options.device == "cuda" && rounds->count() > 0) {
    throw CLI::ValidationError("--rounds",
                               "times CPU runs only: on the GPU each mode is timed with CUDA events "
                               "in one block, then its peak memory is read");
  }
  const bool overflow_mode =
      std::find(options.modes.begin(), options.modes.end(), kOverflowMode) != options.modes.end();
  if (!overflow_mode &&
      (overflow.policy->count() > 0 || overflow.alpha_us->count() > 0 || overflow.cpu_nodes->count() > 0)) {
    throw CLI::ValidationError("--overflow/--alpha-us/--cpu-nodes", "only go with --modes ...,opara+overflow");
  }
  if (overflow_mode) check_overflow_flags(options.compile.overflow, options.compile.costs.profile);
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand("run", "Time a model under each execution mode and check its outputs");
  add_model_flags(run, options->model, options->dtype);
  add_timing_flags(run, *options);
  const CLI::Option* rounds = add_rounds_flag(run, *options);
  add_input_and_report_flags(run, *options);
  add_planning_flags(run, *options);
  // opara+overflow's default: SIR+'s Comm+SD.
  options->compile.overflow.policy = OverflowPolicy::kCommSd;
  const OverflowFlags overflow = add_overflow_flags(run, options->compile.overflow,
                                                    "opara+overflow: which nodes run on the CPU: comm_sd (SIR+ "
                                                    "Comm+SD, needs --profile; the default), manual (--cpu-nodes) or "
                                                    "none");
  run->callback([options, overflow, rounds] {
    check_flag_combinations(*options, overflow, rounds);
    run_modes(*options);
  });
}

}  // namespace opara::bench
