#include "trace_command.h"

#include <fmt/format.h>

#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cpu_modes.h"
#include "csv_output.h"
#include "exec/eager_executor.h"
#include "exec/state_buffers.h"
#include "graph/graph_analysis.h"
#include "json_output.h"
#include "mode_result.h"
#include "mode_runner.h"
#include "model_flags.h"
#include "model_loading.h"
#include "modes.h"
#include "number_checks.h"
#include "opara/compiled_model.h"
#include "opara/error.h"
#include "opara/model_profiler.h"
#include "planning.h"
#include "profile/kernel_attribution.h"
#include "profiler/cupti_profiler.h"
#include "progress.h"
#include "runtime/cpu/cpu_parallel_executor.h"

namespace opara::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct TraceOptions {
  std::string model;
  std::string dtype;  // --dtype: empty, as exported
  std::string device = "cpu";
  std::vector<std::string> modes{"sequential", "opara"};
  std::string out;
  std::string json;
  std::string csv;
  int warmup = 3;
  std::optional<int> max_streams;
  std::string input_shape;
};

// One box of the timeline: a node's run on the CPU, a kernel or copy on the GPU.
struct Span {
  std::string name;
  int lane = 0;         // CPU: the node's stream (eager: 0); GPU: a row of kernels that do not overlap
  double start_us = 0;  // from the start of the mode's traced run
  double duration_us = 0;
  nlohmann::json args;  // node id, stream, grid and block, ...
};

struct TracedMode {
  std::string name;
  int lanes = 1;
  double run_us = 0;  // wall time of the traced run (CPU) or first start to last end (GPU)
  std::vector<Span> spans;
  // CPU: a lower bound on the time any schedule of these node times could take on the mode's
  // workers: the longer of the critical path through them and their sum over the workers. How far run_us is
  // above it is what the schedule (order, stream merging, hand-offs) lost. GPU: not known.
  std::optional<double> bound_us;
  // CPU, planned modes: the schedule compile() chose, as `run` reports it (planned_figures).
  nlohmann::json figures;
};

// The bound of TracedMode::bound_us for nodes of these durations (by node; 0: did not run).
double schedule_bound_us(const Graph& graph, const std::vector<double>& durations_us, int workers) {
  double total = 0;
  for (double duration : durations_us) total += duration;
  return std::max(critical_path(graph, durations_us).length, total / std::max(workers, 1));
}

double microseconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

// One run's node spans on the CPU as TracedMode spans, from `started`; `durations_us` by node.
void add_spans(TracedMode& traced, const Graph& graph, const std::vector<CompiledModel::NodeSpan>& spans,
               Clock::time_point started, std::vector<double>& durations_us) {
  for (const CompiledModel::NodeSpan& span : spans) {
    durations_us[static_cast<std::size_t>(span.node)] = microseconds(span.start, span.end);
    traced.spans.push_back({graph.node(span.node).kind,
                            span.stream,
                            microseconds(started, span.start),
                            microseconds(span.start, span.end),
                            {{"node", span.node}, {"stream", span.stream}}});
  }
}

// Host timings of one run on the CPU, after `warmup` runs. A planned mode is compiled as `run`
// compiles it (compile(): the cap and threads tuned unless --max-streams fixes them), so the trace
// shows the schedule `run` times.
TracedMode trace_on_cpu(const Graph& graph, const ModeSpec& mode, const std::vector<at::Tensor>& inputs,
                        const std::vector<c10::IValue>& arguments, const TraceOptions& options) {
  std::vector<double> durations_us(graph.size(), 0.0);
  if (mode.planned) {
    const CompiledModel compiled = compile(graph, inputs, planned_cpu_options(mode, {}, options.max_streams));
    for (int i = 0; i < options.warmup; ++i) compiled.run(inputs);
    std::vector<CompiledModel::NodeSpan> spans;
    const Clock::time_point started = Clock::now();
    compiled.run_traced(inputs, spans);
    const Clock::time_point finished = Clock::now();
    const int streams = std::max(compiled.stats().streams, 1);
    TracedMode traced{std::string(mode.name), streams, microseconds(started, finished), {}, std::nullopt, nullptr};
    traced.figures = planned_figures(compiled, graph, mode.plan);
    add_spans(traced, compiled.graph(), spans, started, durations_us);
    // The executor's workers: one per stream, at most the usable cores.
    traced.bound_us = schedule_bound_us(compiled.graph(), durations_us, std::min(streams, usable_cores()));
    return traced;
  }
  // Eager: one node at a time, on every core's intra-op threads.
  EagerExecutor eager(graph, c10::kCPU);
  std::vector<CompiledModel::NodeSpan> spans;
  Clock::time_point last;
  bool recording = false;
  eager.set_observer([&](NodeId id, const auto&, const auto&) {
    const Clock::time_point now = Clock::now();
    if (recording) spans.push_back({id, 0, last, now});
    last = now;
  });
  for (int i = 0; i < options.warmup; ++i) eager.run(arguments);
  recording = true;
  const Clock::time_point started = Clock::now();
  last = started;
  eager.run(arguments);
  const Clock::time_point finished = Clock::now();
  TracedMode traced{std::string(mode.name), 1, microseconds(started, finished), {}, std::nullopt, nullptr};
  add_spans(traced, graph, spans, started, durations_us);
  traced.bound_us = schedule_bound_us(graph, durations_us, 1);
  return traced;
}

// Kernels and copies CUPTI recorded in one run on the GPU, after `warmup` runs. A replayed CUDA
// graph's kernels are not on the streams they were captured on, so rows are packed from the
// records themselves: each kernel goes to the first row free at its start, and the rows show how
// many ran at once.
//
// One CUPTI session serves every mode, started before the first graph is captured: CUPTI started
// after a graph exists, or again after an earlier session, has lost graph kernels or crashed on
// replay in some CUDA versions (pytorch/pytorch#75504, #150957). Each mode takes and drops what
// its compilation and warm-up recorded, then takes its one run.
// `state`: the graph's state buffers on the device, which eager is fed after the caller's inputs (a
// compiled mode keeps its own).
TracedMode trace_on_gpu(const Graph& graph, const ModeSpec& mode, const std::vector<at::Tensor>& cpu_inputs,
                        const std::vector<at::Tensor>& state, const TraceOptions& options, CuptiProfiler& cupti) {
  const c10::Device device(options.device);
  std::vector<at::Tensor> inputs;
  for (const at::Tensor& input : cpu_inputs) inputs.push_back(input.to(device));
  std::function<void()> run;
  if (!mode.planned) {
    run = [eager = eager_runner(std::make_shared<EagerExecutor>(graph, device), state), inputs] { eager(inputs); };
  } else {
    Options compile_options;
    compile_options.device = device;
    compile_options.plan = mode.plan;
    compile_options.plan.max_streams = options.max_streams.value_or(0);
    run = [compiled = compile(graph, inputs, compile_options), inputs] { compiled.run(inputs); };
  }
  for (int i = 0; i < options.warmup; ++i) run();
  torch::cuda::synchronize();
  (void)cupti.take();  // compilation and warm-up
  run();
  torch::cuda::synchronize();
  const ActivityRecords records = cupti.take();
  const bool launches = std::any_of(graph.nodes().begin(), graph.nodes().end(),
                                    [](const Node& node) { return node.has(kLaunchesKernel); });
  if (records.kernels.empty() && launches) {
    throw Error(fmt::format(
        "trace: CUPTI recorded no kernel in the {} run of {} (graph kernels lost?); trace that mode alone with "
        "--modes {}",
        mode.name, graph.source_path, mode.name));
  }

  struct Box {
    std::string name;
    std::uint64_t start_ns, end_ns;
    nlohmann::json args;
  };
  std::vector<Box> boxes;
  for (const KernelRecord& kernel : records.kernels) {
    boxes.push_back({kernel.name,
                     kernel.start_ns,
                     kernel.end_ns,
                     {{"grid", {kernel.grid.x, kernel.grid.y, kernel.grid.z}},
                      {"block", {kernel.block.x, kernel.block.y, kernel.block.z}},
                      {"registers_per_thread", kernel.registers_per_thread},
                      {"cupti_stream", kernel.stream}}});
  }
  for (const CopyRecord& copy : records.copies) {
    boxes.push_back({copy.kind, copy.start_ns, copy.end_ns, {{"bytes", copy.bytes}, {"cupti_stream", copy.stream}}});
  }
  TracedMode traced{std::string(mode.name), 0, 0, {}, std::nullopt, nullptr};
  if (boxes.empty()) return traced;
  std::sort(boxes.begin(), boxes.end(), [](const Box& a, const Box& b) { return a.start_ns < b.start_ns; });
  const std::uint64_t first = boxes.front().start_ns;
  std::uint64_t last = first;
  std::vector<std::uint64_t> row_free_at;
  for (Box& box : boxes) {
    auto row =
        std::find_if(row_free_at.begin(), row_free_at.end(), [&](std::uint64_t free) { return free <= box.start_ns; });
    if (row == row_free_at.end()) row = row_free_at.insert(row_free_at.end(), 0);
    *row = std::max(box.end_ns, box.start_ns);
    last = std::max(last, box.end_ns);
    traced.spans.push_back({std::move(box.name), static_cast<int>(row - row_free_at.begin()),
                            static_cast<double>(box.start_ns - first) / 1000,
                            static_cast<double>(box.end_ns > box.start_ns ? box.end_ns - box.start_ns : 0) / 1000,
                            std::move(box.args)});
  }
  traced.lanes = static_cast<int>(row_free_at.size());
  traced.run_us = static_cast<double>(last - first) / 1000;
  return traced;
}

// Chrome's trace event format: a process per mode, a thread per stream, a complete event per node;
// times from each mode's own start, so the modes line up at zero.
nlohmann::json chrome_trace(const LoadedModel& model, const std::vector<TracedMode>& modes, const std::string& device) {
  const bool gpu = device != "cpu";
  nlohmann::json events = nlohmann::json::array();
  for (std::size_t pid = 0; pid < modes.size(); ++pid) {
    const TracedMode& mode = modes[pid];
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", mode.name}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"args", {{"sort_index", pid}}}});
    for (int lane = 0; lane < mode.lanes; ++lane) {
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", pid},
                        {"tid", lane},
                        {"args", {{"name", gpu ? fmt::format("kernels {}", lane) : fmt::format("stream {}", lane)}}}});
    }
    for (const Span& span : mode.spans) {
      events.push_back({{"name", span.name},
                        {"cat", gpu ? "kernel" : "node"},
                        {"ph", "X"},
                        {"pid", pid},
                        {"tid", span.lane},
                        {"ts", span.start_us},
                        {"dur", span.duration_us},
                        {"args", span.args}});
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"model", model.path}, {"device", device}, {"source", gpu ? "CUPTI kernel records" : "host timings"}}}};
}

// One traced run per mode, after its warm-up; on the GPU under one CUPTI session.
std::vector<TracedMode> trace_modes(const LoadedModel& model, const RunInputs& inputs, const TraceOptions& options) {
  const bool gpu = options.device != "cpu";
  // The graph's inputs: the caller's, then its state buffers' first values (one copy, which every
  // mode's runs write as a compiled model's would write its own).
  std::vector<at::Tensor> graph_inputs = inputs.inputs;
  const std::vector<at::Tensor> state = initial_state(model.graph, gpu ? c10::Device(options.device) : c10::kCPU);
  graph_inputs.insert(graph_inputs.end(), state.begin(), state.end());
  const std::vector<c10::IValue> arguments(graph_inputs.begin(), graph_inputs.end());
  std::vector<TracedMode> traced;
  std::optional<CuptiProfiler> cupti;
  if (gpu) cupti.emplace();  // before any graph: see trace_on_gpu
  Progress progress("tracing", options.modes.size());
  for (const std::string& mode : options.modes) {
    traced.push_back(gpu ? trace_on_gpu(model.graph, mode_spec(mode), inputs.inputs, state, options, *cupti)
                         : trace_on_cpu(model.graph, mode_spec(mode), inputs.inputs, arguments, options));
    progress.advance();
  }
  return traced;
}

// Every span of every mode as a CSV row: its args, mode, name, lane, start and duration.
std::vector<nlohmann::json> span_rows(const std::vector<TracedMode>& traced) {
  std::vector<nlohmann::json> rows;
  for (const TracedMode& mode : traced) {
    for (const Span& span : mode.spans) {
      nlohmann::json row = span.args;
      row["mode"] = mode.name;
      row["name"] = span.name;
      row["lane"] = span.lane;
      row["start_us"] = span.start_us;
      row["duration_us"] = span.duration_us;
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

// Prints a row per mode (run time, spans, lanes, concurrency, bound) and returns the --json summary.
nlohmann::json print_summary(std::FILE* table, const LoadedModel& model, const std::vector<TracedMode>& traced,
                             const TraceOptions& options) {
  const bool gpu = options.device != "cpu";
  fmt::print(table, "model   {}\ndevice  {}\n\n", model.path,
             gpu ? options.device + " (CUPTI kernel records of one run per mode)"
                 : std::string("cpu (host timings of one run per mode)"));
  fmt::print(table, "{:<15} {:>9} {:>8} {:>7} {:>12} {:>9}\n", "mode", "run ms", gpu ? "kernels" : "nodes",
             gpu ? "rows" : "streams", "concurrency", "bound ms");
  nlohmann::json summary = {{"model", model.path},
                            {"device", gpu ? options.device : "cpu"},
                            {"source", gpu ? "CUPTI kernel records" : "host timings"},
                            {"modes", nlohmann::json::array()}};
  for (const TracedMode& mode : traced) {
    double busy_us = 0;
    for (const Span& span : mode.spans) busy_us += span.duration_us;
    // Busy time over wall time: above 1 when work overlapped.
    const double concurrency = mode.run_us > 0 ? busy_us / mode.run_us : 0.0;
    fmt::print(table, "{:<15} {:>9.3f} {:>8} {:>7} {:>11.2f}x {:>9}\n", mode.name, mode.run_us / 1000,
               mode.spans.size(), mode.lanes, concurrency,
               mode.bound_us ? fmt::format("{:.3f}", *mode.bound_us / 1000) : "n/a");
    summary["modes"].push_back({{"mode", mode.name},
                                {"run_ms", mode.run_us / 1000},
                                {"spans", mode.spans.size()},
                                {"lanes", mode.lanes},
                                {"busy_ms", busy_us / 1000},
                                {"concurrency", concurrency},
                                {"bound_ms", mode.bound_us ? nlohmann::json(*mode.bound_us / 1000) : nullptr},
                                {"figures", mode.figures}});
  }
  return summary;
}

void run_trace(const TraceOptions& options) {
  std::FILE* table = table_stream({{"--out", options.out}, {"--json", options.json}, {"--csv", options.csv}});
  reject_repeated_modes(options.modes);
  for (const std::string& mode : options.modes) mode_spec(mode);
  const bool gpu = options.device != "cpu";
  if (gpu && !torch::cuda::is_available()) {
    throw Error("--device cuda: no CUDA GPU is visible on this machine; trace on the CPU with --device cpu");
  }
  const LoadedModel model = load_model(options.model, options.dtype);
  const RunInputs inputs = prepare_inputs(model, options.input_shape, std::nullopt);
  const std::vector<TracedMode> traced = trace_modes(model, inputs, options);
  const nlohmann::json summary = print_summary(table, model, traced, options);
  if (!options.json.empty()) write_json(summary, options.json);
  if (!options.out.empty()) {
    write_json(chrome_trace(model, traced, gpu ? options.device : "cpu"), options.out);
    if (options.out != "-") {
      fmt::print(table, "\ntrace   {} (open in https://ui.perfetto.dev or chrome://tracing)\n", options.out);
    }
  }
  if (!options.csv.empty())
    write_csv(span_rows(traced), {"mode", "name", "lane", "start_us", "duration_us"}, options.csv);
}

}  // namespace

void add_trace_command(CLI::App& app) {
  auto options = std::make_shared<TraceOptions>();
  CLI::App* trace = app.add_subcommand("trace", "Record a timeline of one run per mode as a Chrome / Perfetto trace");
  add_model_flags(trace, options->model, options->dtype);
  trace->add_option("--device", options->device, "cpu (host timings per node) or cuda (CUPTI kernel records)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  trace
      ->add_option("--modes", options->modes,
                   "comma-separated modes: eager, sequential, nimble, opara, opara-noreorder, trtllm, torchsched")
      ->delimiter(',');
  trace->add_option("--out,-o", options->out, "the trace JSON ('-' for stdout)")->required();
  trace->add_option("--json", options->json,
                    "also write each mode's run time, spans, lanes and concurrency as JSON ('-' for stdout)");
  trace->add_option("--csv", options->csv, "also write one row per node run as CSV ('-' for stdout)");
  trace->add_option("--warmup,-w", options->warmup, "untraced runs first")->check(kNonNegative);
  trace->add_option("--max-streams", options->max_streams, "merge streams past this many (0: no cap)")
      ->check(kNonNegative);
  trace->add_option("--input-shape", options->input_shape,
                    "inputs for a model without a sidecar JSON: SHAPE or NAME:SHAPE[:DTYPE],...");
  trace->callback([options] { run_trace(*options); });
}

}  // namespace opara::bench
