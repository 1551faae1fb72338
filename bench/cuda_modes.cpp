#include "cuda_modes.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <memory>

#include "exec/eager_executor.h"
#include "exec/outputs.h"
#include "modes.h"
#include "opara/error.h"
#include "progress.h"
#include "runtime/cuda/stream_lease.h"
#include "support/percentile.h"

namespace opara::bench {
namespace {

using Runner = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

struct ModeResult {
  std::string name;
  std::vector<double> samples_ms;
  std::vector<at::Tensor> outputs;
  std::size_t peak_bytes = 0;
  nlohmann::json entry;
};

// Milliseconds of each run between CUDA events on the current stream.
std::vector<double> time_on_gpu(const Runner& runner, const std::vector<at::Tensor>& inputs, int iters,
                                std::vector<at::Tensor>& outputs, Progress* progress = nullptr) {
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
    if (progress) progress->advance();
    start.record(stream);
    outputs = runner(inputs);
    end.record(stream);
    end.synchronize();
    samples.push_back(start.elapsed_time(end));
  }
  return samples;
}

// The largest difference over the largest magnitude of the reference, output by output: an
// element-wise ratio would blow a 1e-7 difference at an exact zero (a ReLU's) up to 1e5.
double max_relative_difference(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected) {
  double worst = 0;
  for (std::size_t i = 0; i < actual.size() && i < expected.size(); ++i) {
    if (actual[i].numel() == 0 || expected[i].numel() == 0) continue;
    const at::Tensor a = actual[i].to(at::kDouble).cpu();
    const at::Tensor e = expected[i].to(at::kDouble).cpu();
    const double scale = std::max(e.abs().max().item<double>(), 1e-12);
    worst = std::max(worst, (a - e).abs().max().item<double>() / scale);
  }
  return worst;
}

std::string megabytes(std::size_t bytes) {
  return fmt::format("{:.1f}", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

nlohmann::json run_cuda_modes(const LoadedModel& model, const CudaRunRequest& request, std::FILE* table) {
  const c10::Device device(c10::kCUDA, c10::cuda::current_device());
  std::vector<at::Tensor> inputs;
  for (const at::Tensor& input : request.inputs) inputs.push_back(input.to(device));
  auto allocated = [&] {
    return static_cast<std::size_t>(
        c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].current);
  };
  auto peak = [&] {
    return static_cast<std::size_t>(
        c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].peak);
  };

  std::vector<std::string> modes{"eager"};  // the reference, always first
  for (const std::string& mode : request.modes) {
    if (mode != "eager") modes.push_back(mode);
  }
  // opara and opara-noreorder share Opara's streams; only opara reorders the launches (Alg. 2).
  // opara+overflow plans as opara does.
  const auto plan_of = [&](const std::string& mode) {
    PlanOptions plan = mode_spec(mode == kOverflowMode ? "opara" : mode).plan;
    plan.max_streams = request.options.plan.max_streams;
    return plan;
  };
  // cuBLAS makes a workspace per (handle, stream) on first use and keeps it (32 MiB on Hopper):
  // the streams every mode will lease get theirs now, so that no mode's peak holds the
  // workspaces of streams it happened to use first. A model leases its plan's streams and an
  // origin, one more for host steps, and twice that while smaller-pool captures both ways.
  int most_streams = 0;
  for (const std::string& mode : modes) {
    if (mode == "eager") continue;
    most_streams = std::max(most_streams, make_plan(model.graph, plan_of(mode)).stream_count);
  }
  // Under smaller-pool both captures, each with its host-step stream, are alive at once.
  const std::size_t captures = request.options.cuda.memory == MemoryProtection::kSmallerPool ? 2 : 1;
  const std::size_t warmed = captures * (static_cast<std::size_t>(most_streams) + 2);
  const std::size_t workspace_bytes = warm_idle_streams(device.index(), warmed);
  std::vector<ModeResult> results;
  for (const std::string& mode : modes) {
    ModeResult& result = results.emplace_back();
    result.name = mode;
    result.entry = {{"mode", mode}};
    c10::cuda::device_synchronize();
    const std::size_t before = allocated();
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
    Runner runner;
    std::shared_ptr<EagerExecutor> eager;
    std::optional<CompiledModel> compiled;
    if (mode == "eager") {
      eager = std::make_shared<EagerExecutor>(model.graph, device);
      runner = [eager](const std::vector<at::Tensor>& in) {
        return flatten_tensors(eager->run(std::vector<c10::IValue>(in.begin(), in.end())));
      };
    } else {
      Options options = request.options;
      options.device = device;
      options.plan = plan_of(mode);
      if (mode != kOverflowMode) options.overflow = {};
      // Views of the static outputs, as torch.cuda.graph gives: read once the timing is done,
      // a clone each run would time a copy eager does not make. The input copy into the static
      // buffers is timed: every CompiledModel::run makes it.
      options.outputs = Options::Outputs::kView;
      {
        // No steps to count inside compile(): the bar says what the wait is for.
        const Progress capturing(fmt::format("warming up and capturing {}", mode), 1);
        compiled = compile(model.graph, inputs, options);
      }
      runner = [model = *compiled](const std::vector<at::Tensor>& in) { return model.run(in); };
    }
    Progress progress(fmt::format("timing {}", mode), static_cast<std::size_t>(request.warmup + request.iters));
    time_on_gpu(runner, inputs, request.warmup, result.outputs, &progress);
    result.samples_ms = time_on_gpu(runner, inputs, request.iters, result.outputs, &progress);
    c10::cuda::device_synchronize();
    result.peak_bytes = peak() > before ? peak() - before : 0;
    if (compiled) {
      // CompiledModel::stats(), as to_json names them; the CPU's tuning is not the GPU's, and
      // peak_bytes is the mode's own (compile and runs), measured above.
      const CompiledStats stats = compiled->stats();
      const nlohmann::json stats_json = nlohmann::json::parse(to_json(stats));  // items() only refers to it
      for (const auto& [key, value] : stats_json.items()) {
        if (key != "device" && key != "tuning" && key != "peak_bytes") result.entry[key] = value;
      }
      result.entry["stream_policy"] = to_string(compiled->plan().stream_policy);
      result.entry["order_policy"] = to_string(compiled->plan().order_policy);
      if (mode == kOverflowMode) {
        result.entry["overflow"] = to_string(request.options.overflow.policy);
        result.entry["host_ms_per_run"] = stats.host_ms / static_cast<double>(std::max<std::size_t>(stats.runs, 1));
      }
    }
  }

  const auto result_of = [&](const std::string& name) -> const ModeResult* {
    const auto found =
        std::find_if(results.begin(), results.end(), [&](const ModeResult& result) { return result.name == name; });
    return found == results.end() ? nullptr : &*found;
  };
  const auto median_of = [&](const std::string& name) -> std::optional<double> {
    const ModeResult* result = result_of(name);
    return result ? std::optional<double>(percentile(result->samples_ms, 0.5)) : std::nullopt;
  };
  const std::optional<double> eager_ms = median_of("eager");
  const std::optional<double> sequential_ms = median_of("sequential");
  const std::optional<double> nimble_ms = median_of("nimble");
  const ModeResult* sequential = result_of("sequential");
  fmt::print(table, "\ncuBLAS workspaces of {} streams made before timing: {} MiB, in no mode's peak\n", warmed,
             megabytes(workspace_bytes));
  fmt::print(table, "\n{:<15} {:>9} {:>9} {:>9} {:>8} {:>8} {:>10} {:>10} {:>9} {:>7} {:>7}\n", "mode", "median ms",
             "p10 ms", "p90 ms", "x seq", "x eager", "max |diff|", "max rel", "peak MiB", "streams", "events");
  nlohmann::json entries = nlohmann::json::array();
  const std::vector<at::Tensor>& reference = results.front().outputs;
  for (ModeResult& result : results) {
    const bool requested = std::find(request.modes.begin(), request.modes.end(), result.name) != request.modes.end();
    if (!requested) continue;
    const double median = percentile(result.samples_ms, 0.5);
    const double difference = max_abs_difference(result.outputs, reference);
    const double relative = max_relative_difference(result.outputs, reference);
    nlohmann::json& entry = result.entry;
    entry["median_ms"] = median;
    entry["p10_ms"] = percentile(result.samples_ms, 0.1);
    entry["p90_ms"] = percentile(result.samples_ms, 0.9);
    entry["speedup_vs_sequential"] = sequential_ms ? nlohmann::json(*sequential_ms / median) : nlohmann::json(nullptr);
    entry["speedup_vs_eager"] = eager_ms ? nlohmann::json(*eager_ms / median) : nlohmann::json(nullptr);
    entry["max_abs_diff"] = difference;
    entry["max_rel_diff"] = relative;
    entry["peak_bytes"] = result.peak_bytes;
    entry["speedup_vs_nimble"] = nimble_ms ? nlohmann::json(*nimble_ms / median) : nlohmann::json(nullptr);
    // What a parallel graph's streams cost in memory: its peak over the sequential graph's.
    entry["peak_vs_sequential"] =
        sequential && sequential->peak_bytes > 0
            ? nlohmann::json(static_cast<double>(result.peak_bytes) / static_cast<double>(sequential->peak_bytes))
            : nlohmann::json(nullptr);
    const auto ratio = [](const nlohmann::json& value) {
      return value.is_null() ? std::string("n/a") : fmt::format("{:.2f}", value.get<double>());
    };
    fmt::print(table, "{:<15} {:>9.3f} {:>9.3f} {:>9.3f} {:>8} {:>8} {:>10.3g} {:>10.3g} {:>9} {:>7} {:>7}\n",
               result.name, median, entry["p10_ms"].get<double>(), entry["p90_ms"].get<double>(),
               ratio(entry["speedup_vs_sequential"]), ratio(entry["speedup_vs_eager"]), difference, relative,
               megabytes(result.peak_bytes), entry.value("streams", 1), entry.value("events", 0));
    entries.push_back(entry);
  }
  for (const nlohmann::json& entry : entries) {
    if (entry.at("mode") != kOverflowMode) continue;
    fmt::print(table,
               "\n{} ({}): {} of {} nodes on the CPU, {} in host steps; {} KiB to the host and {} KiB back per "
               "run, {:.3f} ms on the host per run",
               kOverflowMode, entry["overflow"].get<std::string>(), entry["cpu_nodes"].get<std::size_t>(),
               model.graph.size(), entry["host_nodes"].get<std::size_t>(),
               entry["bytes_to_host"].get<std::size_t>() / 1024, entry["bytes_to_device"].get<std::size_t>() / 1024,
               entry["host_ms_per_run"].get<double>());
    if (entry["predicted_us"].get<double>() > 0) {
      fmt::print(table, "; Comm+SD predicted {:.1f} us against {:.1f} us all on the GPU",
                 entry["predicted_us"].get<double>(), entry["predicted_none_us"].get<double>());
    }
    fmt::print(table, "\n");
  }
  return entries;
}

}  // namespace opara::bench
