#include "cuda_modes.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <memory>

#include "mode_runner.h"
#include "modes.h"
#include "output_check.h"
#include "progress.h"
#include "runtime/cuda/capture_pool.h"
#include "runtime/cuda/stream_lease.h"

namespace opara::bench {
namespace {

// Milliseconds of each run between CUDA events on the current stream.
std::vector<double> time_on_gpu(const Runner& runner, const std::vector<at::Tensor>& inputs, int iters,
                                std::vector<at::Tensor>& outputs, Progress& progress) {
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
  std::vector<double> samples;
  samples.reserve(iters);
  // Created before the loop (CUDAEvent creates its event lazily, in the first record(), which
  // would put cudaEventCreate inside the timed window), reused: each run synchronises on `end`.
  at::cuda::CUDAEvent start(cudaEventDefault);
  at::cuda::CUDAEvent end(cudaEventDefault);
  start.create(stream.device_index());
  end.create(stream.device_index());
  for (int i = 0; i < iters; ++i) {
    progress.advance();
    start.record(stream);
    outputs = runner(inputs);
    end.record(stream);
    end.synchronize();
    samples.push_back(start.elapsed_time(end));
  }
  return samples;
}

std::size_t allocated(c10::DeviceIndex device) {
  return static_cast<std::size_t>(c10::cuda::CUDACachingAllocator::getDeviceStats(device).allocated_bytes[0].current);
}

std::size_t peak(c10::DeviceIndex device) {
  return static_cast<std::size_t>(c10::cuda::CUDACachingAllocator::getDeviceStats(device).allocated_bytes[0].peak);
}

// The modes in the order they run: eager, the reference, always first.
std::vector<std::string> modes_in_order(const CudaRunRequest& request) {
  std::vector<std::string> modes{"eager"};
  for (const std::string& mode : request.modes) {
    if (mode != "eager") modes.push_back(mode);
  }
  return modes;
}

// opara and opara-noreorder share Opara's streams; only opara reorders the launches (Alg. 2).
// opara+overflow plans as opara does.
PlanOptions plan_of(const std::string& mode, const CudaRunRequest& request) {
  PlanOptions plan = mode_spec(mode == kOverflowMode ? "opara" : mode).plan;
  plan.max_streams = request.options.plan.max_streams;
  return plan;
}

// cuBLAS makes a workspace per (handle, stream) on first use and keeps it (32 MiB on Hopper):
// the streams every mode will lease get theirs now, so that no mode's peak holds the
// workspaces of streams it happened to use first. A model captures on its plan's streams and an
// origin (CapturePool::streams_for), with one more for host steps, and twice that while
// smaller-pool captures both ways.
// Returns the note that says what they took.
std::string warm_cublas_workspaces(const LoadedModel& model, const CudaRunRequest& request, c10::DeviceIndex device) {
  int most_streams = 0;
  for (const std::string& mode : modes_in_order(request)) {
    if (mode == "eager") continue;
    most_streams = std::max(most_streams, make_plan(model.graph, plan_of(mode, request)).stream_count);
  }
  // Under smaller-pool both captures, each with its host-step stream, are alive at once.
  const std::size_t captures = request.options.cuda.memory == MemoryProtection::kSmallerPool ? 2 : 1;
  const std::size_t warmed = captures * (CapturePool::streams_for(most_streams) + 1);
  const std::size_t workspace_bytes = warm_idle_streams(device, warmed);
  return fmt::format("cuBLAS workspaces of {} streams made before timing: {:.1f} MiB, in no mode's peak", warmed,
                     static_cast<double>(workspace_bytes) / (1 << 20));
}

// A graph mode compiled as a user would, with views of the static outputs as torch.cuda.graph
// gives: read once the timing is done, a clone each run would time a copy eager does not make.
// The input copy into the static buffers is timed: every CompiledModel::run makes it.
CompiledModel compile_mode(const std::string& mode, const LoadedModel& model, const std::vector<at::Tensor>& inputs,
                           const CudaRunRequest& request, const c10::Device& device) {
  Options options = request.options;
  options.device = device;
  options.plan = plan_of(mode, request);
  if (mode != kOverflowMode) options.overflow = {};
  options.outputs = Options::Outputs::kView;
  // No steps to count inside compile(): the bar says what the wait is for.
  const Progress capturing(fmt::format("warming up and capturing {}", mode), 1);
  return compile(model.graph, inputs, options);
}

// planned_figures(), and opara+overflow's policy and host time per run; the schedule in words.
void describe_graph_mode(ModeResult& result, const CompiledModel& compiled, const LoadedModel& model,
                         const CudaRunRequest& request) {
  result.figures = planned_figures(compiled, model.graph, plan_of(result.mode, request));
  const CompiledStats stats = compiled.stats();
  if (result.mode == kOverflowMode) {
    result.figures["overflow"] = to_string(request.options.overflow.policy);
    result.figures["host_ms_per_run"] = stats.host_ms / static_cast<double>(std::max<std::size_t>(stats.runs, 1));
  }
  result.schedule =
      fmt::format("{} of {} streams, {} events{}", stats.streams, result.figures.at("streams_uncapped").get<int>(),
                  stats.events, stats.segments > 1 ? fmt::format(", {} segments", stats.segments) : "");
}

// What compile() chose for `mode` on the GPU's memory and time: the cap the memory budget put on
// the plan before capture (the pool estimates), and the candidates it captured and timed
// (CudaOptions::measure_ms) with the one kept; empty where it did neither.
std::string candidates_note(const std::string& mode, const CompiledStats& stats) {
  const auto mib = [](std::size_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  // Unmeasured, memory_budget_bytes is the budget of the sequential graph's estimate, which capped
  // the plan; measured, it is that of its measured pool, which the candidates were held to.
  const std::string capped =
      stats.budget_stream_cap == 0
          ? std::string()
          : fmt::format(
                "the memory budget capped the plan at {} streams before capture (sequential graph's pool "
                "estimated at {:.1f} MiB)",
                stats.budget_stream_cap, mib(stats.sequential_pool_estimate_bytes));
  if (stats.candidates.empty()) {
    if (capped.empty()) return "";
    return fmt::format("{}: {}, a budget of {:.1f} MiB; pool {:.1f} MiB, estimated {:.1f} MiB", mode, capped,
                       mib(stats.memory_budget_bytes), mib(stats.pool_bytes), mib(stats.pool_estimate_bytes));
  }
  std::vector<std::string> parts;
  for (std::size_t k = 0; k < stats.candidates.size(); ++k) {
    const CudaCandidate& candidate = stats.candidates[k];
    const bool plan = k + 1 == stats.candidates.size();
    const std::string name = candidate.max_streams == 1 ? std::string("one stream")
                             : plan                     ? fmt::format("the plan ({} streams)", candidate.streams)
                                                        : fmt::format("capped at {}", candidate.max_streams);
    const std::string timing = candidate.over_budget
                                   ? std::string("over budget, not timed")
                                   : fmt::format("{:.3f} ms, {:.2f}x", candidate.median_ms, candidate.speedup);
    parts.push_back(fmt::format(
        "{}{}: {}, pool {:.1f} MiB (estimated {:.1f}), cuBLAS workspaces {:.0f} MiB (estimated {:.0f})",
        k == stats.candidate_chosen ? "*" : "", name, timing, mib(candidate.pool_bytes),
        mib(candidate.pool_estimate_bytes), mib(candidate.workspace_bytes), mib(candidate.workspace_estimate_bytes)));
  }
  return fmt::format(
      "{}: {}compile() measured {} candidates in {:.0f} ms (budget {:.1f} MiB of pool and workspaces; * kept): {}",
      mode, capped.empty() ? "" : capped + "; ", stats.candidates.size(), stats.measure_ms,
      mib(stats.memory_budget_bytes), fmt::join(parts, "; "));
}

// One mode, built, warmed up and timed, with the peak memory it allocated (compile and runs).
ModeResult measure_mode(const std::string& mode, const LoadedModel& model, const std::vector<at::Tensor>& inputs,
                        const CudaRunRequest& request, const c10::Device& device) {
  ModeResult result;
  result.mode = mode;
  result.reported = std::find(request.modes.begin(), request.modes.end(), mode) != request.modes.end();
  c10::cuda::device_synchronize();
  const std::size_t before = allocated(device.index());
  c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
  std::optional<CompiledModel> compiled;
  Runner runner;
  if (mode == "eager") {
    runner = eager_runner(std::make_shared<EagerExecutor>(model.graph, device), initial_state(model.graph, device));
    result.schedule = "node by node, one stream";
  } else {
    compiled = compile_mode(mode, model, inputs, request, device);
    runner = compiled_runner(*compiled);
  }
  c10::cuda::device_synchronize();
  const std::size_t compile_peak = peak(device.index());
  c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());  // from here, what the model holds and its runs
  Progress progress(fmt::format("timing {}", mode), static_cast<std::size_t>(request.warmup + request.iters));
  time_on_gpu(runner, inputs, request.warmup, result.outputs, progress);
  result.rounds_ms = {time_on_gpu(runner, inputs, request.iters, result.outputs, progress)};
  c10::cuda::device_synchronize();
  const std::size_t run_peak = peak(device.index());
  const std::size_t most = std::max(compile_peak, run_peak);
  result.peak_bytes = most > before ? most - before : 0;
  result.run_peak_bytes = run_peak > before ? run_peak - before : 0;
  if (compiled) {
    describe_graph_mode(result, *compiled, model, request);
    result.candidates_note = candidates_note(mode, compiled->stats());
  }
  return result;
}

// What CPU overflow did: nodes on the CPU and in host steps, bytes each way, host time, and
// Comm+SD's prediction.
std::string overflow_note(const ModeResult& result, std::size_t graph_nodes) {
  const nlohmann::json& figures = result.figures;
  std::string note = fmt::format(
      "{} ({}): {} of {} nodes on the CPU, {} in host steps; {} KiB to the host and {} KiB back per run, {:.3f} ms "
      "on the host per run",
      kOverflowMode, figures.at("overflow").get<std::string>(), figures.at("cpu_nodes").get<std::size_t>(), graph_nodes,
      figures.at("host_nodes").get<std::size_t>(), figures.at("bytes_to_host").get<std::size_t>() / 1024,
      figures.at("bytes_to_device").get<std::size_t>() / 1024, figures.at("host_ms_per_run").get<double>());
  if (figures.at("predicted_us").get<double>() > 0) {
    note += fmt::format("; Comm+SD predicted {:.1f} us against {:.1f} us all on the GPU",
                        figures.at("predicted_us").get<double>(), figures.at("predicted_none_us").get<double>());
  }
  return note;
}

}  // namespace

MeasuredModes run_cuda_modes(const LoadedModel& model, const CudaRunRequest& request) {
  const c10::Device device(c10::kCUDA, c10::cuda::current_device());
  std::vector<at::Tensor> inputs;
  for (const at::Tensor& input : request.inputs) inputs.push_back(input.to(device));
  MeasuredModes measured;
  measured.notes.push_back(warm_cublas_workspaces(model, request, device.index()));
  for (const std::string& mode : modes_in_order(request)) {
    measured.modes.push_back(measure_mode(mode, model, inputs, request, device));
  }
  const std::vector<at::Tensor> reference = measured.modes.front().outputs;  // eager's
  for (ModeResult& result : measured.modes) {
    result.check = compare_outputs(result.outputs, reference);
    if (result.reported && !result.candidates_note.empty()) measured.notes.push_back(result.candidates_note);
    if (result.reported && result.mode == kOverflowMode) {
      measured.notes.push_back(overflow_note(result, model.graph.size()));
    }
  }
  return measured;
}

}  // namespace opara::bench
