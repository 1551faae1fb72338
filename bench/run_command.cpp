#include "run_command.h"

#include <c10/core/Device.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "json_output.h"
#include "model_loading.h"
#include "opara/eager_executor.h"
#include "opara/error.h"
#include "opara/outputs.h"

namespace opara::bench {
namespace {

struct RunOptions {
  std::string model;
  std::string device = "cpu";
  std::vector<std::string> modes{"eager"};
  int iters = 20;
  int warmup = 3;
  std::string json;
  std::string input_shape;
  std::optional<std::uint64_t> seed;
};

// Modes this build can run, and those promised by later stages.
const std::vector<std::string> kAvailableModes = {"eager"};
const std::vector<std::string> kGpuModes = {"sequential", "nimble", "opara"};

double percentile(std::vector<double> samples, double fraction) {
  std::sort(samples.begin(), samples.end());
  const auto index = static_cast<std::size_t>(fraction * static_cast<double>(samples.size() - 1) + 0.5);
  return samples[std::min(index, samples.size() - 1)];
}

void run_modes(const RunOptions& options) {
  for (const std::string& mode : options.modes) {
    if (std::find(kAvailableModes.begin(), kAvailableModes.end(), mode) == kAvailableModes.end()) {
      throw Error(
          fmt::format("mode '{}' is not available in this build; available: {} (the CUDA graph modes "
                      "{} arrive with the CUDA graph runtime)",
                      mode, fmt::join(kAvailableModes, ", "), fmt::join(kGpuModes, ", ")));
    }
  }
  const c10::Device device(options.device);
  if (device.is_cuda() && !torch::cuda::is_available()) {
    throw Error("--device cuda: no CUDA GPU is visible on this machine; use --device cpu");
  }
  const LoadedModel model = load_model(options.model);
  const RunInputs inputs = prepare_inputs(model, options.input_shape, options.seed);
  // With --json - the JSON alone goes to stdout; the table then goes to stderr.
  std::FILE* table = options.json == "-" ? stderr : stdout;
  fmt::print(table, "model   {} ({} nodes, imported in {:.1f} ms)\n", model.path, model.graph.size(), model.import_ms);
  fmt::print(table, "device  {}\ninputs  {}\n", device.str(), inputs.origin);
  if (!torch::cuda::is_available()) {
    fmt::print(table, "note    no GPU here: the CUDA graph modes ({}) need a GPU\n", fmt::join(kGpuModes, ", "));
  }
  fmt::print(table, "\n{:<10} {:>10} {:>10} {:>14} {:>8}\n", "mode", "median ms", "p90 ms", "max |diff|", "bitwise");

  nlohmann::json report = {{"model", model.path},    {"device", device.str()},   {"import_ms", model.import_ms},
                           {"iters", options.iters}, {"warmup", options.warmup}, {"inputs", inputs.origin}};
  for (const std::string& mode : options.modes) {
    EagerExecutor executor(model.graph, device);
    const std::vector<c10::IValue> arguments(inputs.inputs.begin(), inputs.inputs.end());
    std::vector<at::Tensor> outputs;
    for (int i = 0; i < options.warmup; ++i) outputs = flatten_tensors(executor.run(arguments));
    std::vector<double> samples;
    for (int i = 0; i < options.iters; ++i) {
      const auto started = std::chrono::steady_clock::now();
      outputs = flatten_tensors(executor.run(arguments));
      if (device.is_cuda()) torch::cuda::synchronize();
      samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
    }
    std::optional<double> difference;
    std::optional<bool> identical;
    if (inputs.expected) {
      difference = max_abs_difference(outputs, *inputs.expected);
      identical = bitwise_equal(outputs, *inputs.expected);
    }
    const double median = percentile(samples, 0.5);
    const double p90 = percentile(samples, 0.9);
    fmt::print(table, "{:<10} {:>10.3f} {:>10.3f} {:>14} {:>8}\n", mode, median, p90,
               difference ? fmt::format("{:.3g}", *difference) : "n/a",
               identical ? (*identical ? "yes" : "no") : "n/a");
    nlohmann::json entry = {
        {"mode", mode}, {"median_ms", median}, {"p90_ms", p90}, {"peak_live_values", executor.peak_live_values()}};
    entry["max_abs_diff"] = difference ? nlohmann::json(*difference) : nlohmann::json(nullptr);
    entry["bitwise_equal"] = identical ? nlohmann::json(*identical) : nlohmann::json(nullptr);
    report["modes"].push_back(entry);
  }
  if (!options.json.empty()) write_json(report, options.json);
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand("run", "Time a model under each execution mode and check its outputs");
  run->add_option("--model,-m", options->model, "model file (.pt or .pt2) or name in torchscript_models/")->required();
  run->add_option("--device", options->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  run->add_option("--modes", options->modes, "comma-separated execution modes")->delimiter(',');
  run->add_option("--iters,-n", options->iters, "timed iterations")->check(CLI::PositiveNumber);
  run->add_option("--warmup,-w", options->warmup, "untimed iterations first")->check(CLI::NonNegativeNumber);
  run->add_option("--json", options->json, "also write the results as JSON to this file ('-' for stdout)");
  run->add_option("--input-shape", options->input_shape,
                  "inputs for a model without a sidecar JSON: SHAPE or NAME:SHAPE[:DTYPE],... (1x3x224x224)");
  run->add_option("--seed", options->seed, "random inputs from this seed instead of the reference inputs");
  run->callback([options] { run_modes(*options); });
}

}  // namespace opara::bench
