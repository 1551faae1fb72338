#include "cpu_modes.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "mode_runner.h"
#include "modes.h"
#include "opara/error.h"
#include "output_check.h"
#include "progress.h"
#include "tuning/cpu_tuning.h"
#include "tuning/round_timing.h"

namespace opara::bench {

Options planned_cpu_options(const ModeSpec& spec, Options options, std::optional<int> max_streams) {
  options.device = c10::Device(c10::kCPU);
  options.plan = spec.plan;
  options.overflow = {};  // opara+overflow is the GPU's
  if (max_streams) {
    options.plan.max_streams = *max_streams;
    options.cpu.tuning_ms = 0;
  }
  return options;
}

namespace {

// Long enough for the previous mode's OpenMP threads to stop spinning (round_timing.h): the
// tuner's own settle.
const Settle kCpuSettle{1, CpuTuningOptions{}.settle};

// A mode set up to be timed: what it measured so far and what runs it.
struct CpuMode {
  ModeResult result;
  Runner runner;
  std::shared_ptr<EagerExecutor> eager;
  std::optional<CompiledModel> compiled;
};

CpuMode eager_mode(const LoadedModel& model) {
  CpuMode mode;
  mode.result.mode = "eager";
  mode.result.schedule = "node by node, one thread pool";
  mode.eager = std::make_shared<EagerExecutor>(model.graph, c10::Device(c10::kCPU));
  mode.runner = eager_runner(mode.eager, initial_state(model.graph, c10::kCPU));
  return mode;
}

// "3 of 4 streams x 1 threads, 5 events (cap tuned)".
std::string cpu_schedule(const nlohmann::json& figures) {
  const bool tuned = figures.at("tuned").get<bool>();
  const bool searched = figures.at("priorities") == "searched";
  return fmt::format("{} of {} streams x {} threads, {} events{}", figures.at("streams").get<int>(),
                     figures.at("streams_uncapped").get<int>(), figures.at("intra_op_threads").get<int>(),
                     figures.at("events").get<std::size_t>(),
                     !tuned     ? ""
                     : searched ? " (cap tuned, priorities searched)"
                                : " (cap tuned)");
}

// As a user compiles for the CPU: compile() plans, and tunes the cap and threads unless
// --max-streams or --threads fixes them.
CpuMode planned_mode(const std::string& name, const LoadedModel& model, const RunInputs& inputs,
                     const CpuRunRequest& request) {
  const ModeSpec& spec = mode_spec(name);
  const Options options = planned_cpu_options(spec, request.options, request.max_streams);
  CpuMode mode;
  mode.result.mode = name;
  {
    const Progress compiling(fmt::format("compiling {}", name), 1);
    mode.compiled = compile(model.graph, inputs.inputs, options);
  }
  mode.result.figures = planned_figures(*mode.compiled, model.graph, spec.plan);
  mode.result.schedule = cpu_schedule(mode.result.figures);
  mode.runner = compiled_runner(*mode.compiled);
  return mode;
}

// Runs `mode` `iters` times, keeping the last outputs; each run's milliseconds.
std::vector<double> time_runs(CpuMode& mode, const std::vector<at::Tensor>& inputs, int iters) {
  std::vector<double> samples;
  for (int i = 0; i < iters; ++i) {
    const auto started = std::chrono::steady_clock::now();
    mode.result.outputs = mode.runner(inputs);
    samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
  }
  return samples;
}

// Each mode is timed in one block per round: interleaving single runs would let one mode's idle
// OpenMP threads, still spinning, slow the next mode down.
void time_in_interleaved_rounds(std::vector<CpuMode>& modes, const RunInputs& inputs, const CpuRunRequest& request) {
  for (int i = 0; i < request.warmup; ++i) {
    for (CpuMode& mode : modes) time_runs(mode, inputs.inputs, 1);
  }
  std::vector<BlockTimer> timers;
  for (CpuMode& mode : modes) {
    timers.push_back([&mode, &inputs](int count) { return time_runs(mode, inputs.inputs, count); });
  }
  Progress progress("timing", modes.size() * static_cast<std::size_t>(request.iters));
  const RoundTimes times =
      time_in_rounds(timers, request.rounds, request.iters, {2, kCpuSettle.at_least},
                     [&progress](int count) { progress.advance(static_cast<std::size_t>(count)); });
  for (std::size_t k = 0; k < modes.size(); ++k) modes[k].result.rounds_ms = times.samples[k];
}

OutputsCheck compare_to_reference(const CpuMode& mode, const LoadedModel& model, const RunInputs& inputs) {
  try {
    return compare_outputs(mode.result.outputs, *inputs.expected);
  } catch (const Error& error) {  // another count or shape of outputs
    throw Error(
        fmt::format("{}: {} does not give the expected outputs ({}): {}. If the reference is stale or another model's, "
                    "export the model again (scripts/export_models.py)",
                    model.path, mode.result.mode, inputs.origin, error.what()));
  }
}

// ATen splits a reduction by the intra-op thread count, so a worker with fewer threads than the reference had may
// differ in the last bits; it must then equal eager at its own count. Returns the table's footnote, empty when not
// needed.
std::string check_at_worker_threads(CpuMode& mode, const LoadedModel& model, const RunInputs& inputs) {
  const int worker_threads = mode.compiled ? mode.compiled->stats().intra_op_threads : 0;
  const int previous = at::get_num_threads();
  if (mode.result.check.bitwise_equal != false || !mode.compiled || worker_threads == previous) return "";
  at::set_num_threads(worker_threads);
  const std::vector<at::Tensor> same_threads =
      eager_runner(std::make_shared<EagerExecutor>(model.graph, c10::Device(c10::kCPU)),
                   initial_state(model.graph, c10::kCPU))(inputs.inputs);
  at::set_num_threads(previous);
  mode.result.check.bitwise_equal_eager_same_threads = bitwise_equal(mode.result.outputs, same_threads);
  return fmt::format(
      "* equal bit for bit to eager run with the same {} intra-op thread(s): ATen splits reductions by the thread "
      "count, and the reference ran with {}",
      worker_threads, previous);
}

}  // namespace

MeasuredModes run_cpu_modes(const LoadedModel& model, const RunInputs& inputs, const CpuRunRequest& request) {
  std::vector<CpuMode> modes;
  for (const std::string& name : request.modes) {
    modes.push_back(mode_spec(name).planned ? planned_mode(name, model, inputs, request) : eager_mode(model));
  }
  time_in_interleaved_rounds(modes, inputs, request);
  MeasuredModes measured;
  std::string footnote;
  for (CpuMode& mode : modes) {
    if (inputs.expected) mode.result.check = compare_to_reference(mode, model, inputs);
    const std::string note = check_at_worker_threads(mode, model, inputs);
    if (!note.empty()) footnote = note;
    if (mode.eager) mode.result.peak_live_values = mode.eager->peak_live_values();
    measured.modes.push_back(std::move(mode.result));
  }
  if (!footnote.empty()) measured.notes.push_back(footnote);
  return measured;
}

void fail_on_wrong_outputs(const LoadedModel& model, const RunInputs& inputs, const std::vector<ModeResult>& modes) {
  std::vector<std::string> wrong;
  for (const ModeResult& mode : modes) {
    if (mode.check.bitwise_equal == false && !mode.check.bitwise_equal_eager_same_threads.value_or(false)) {
      wrong.push_back(mode.mode);
    }
  }
  if (wrong.empty()) return;
  const bool eager_too = std::find(wrong.begin(), wrong.end(), "eager") != wrong.end();
  std::string why;
  const std::optional<int> reference_threads = model.spec ? model.spec->intra_op_threads : std::nullopt;
  if (eager_too && reference_threads && *reference_threads != at::get_num_threads()) {
    why = fmt::format(
        ". Eager itself differs: the reference was made with {} intra-op threads and this run has {} (reductions "
        "split their work by the thread count); run with OMP_NUM_THREADS={}, or export the model again here "
        "(scripts/export_models.py)",
        *reference_threads, at::get_num_threads(), *reference_threads);
  } else if (eager_too) {
    why =
        ". Eager itself differs, so the reference may be stale or another model's: export the model again "
        "(scripts/export_models.py)";
  }
  throw Error(fmt::format("{}: the outputs of {} are not the expected ones ({}; see max |diff|){}", model.path,
                          fmt::join(wrong, ", "), inputs.origin, why));
}

}  // namespace opara::bench
