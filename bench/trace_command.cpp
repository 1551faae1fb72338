#include "trace_command.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "csv_output.h"
#include "json_output.h"
#include "model_loading.h"
#include "modes.h"
#include "opara/cpu_parallel_executor.h"
#include "opara/eager_executor.h"
#include "opara/error.h"
#include "opara/model_costs.h"
#include "progress.h"

namespace opara::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct TraceOptions {
  std::string model;
  std::string device = "cpu";
  std::vector<std::string> modes{"sequential", "opara"};
  std::string out;
  std::string csv;
  int warmup = 3;
  std::optional<int> max_streams;
  std::string input_shape;
};

// One node's execution in a traced run.
struct Span {
  NodeId node = -1;
  int lane = 0;  // the stream; eager runs on lane 0
  Clock::time_point start{};
  Clock::time_point end{};
};

struct TracedMode {
  std::string name;
  int lanes = 1;
  Clock::time_point started{};
  Clock::time_point finished{};
  std::vector<Span> spans;  // by NodeId; nodes that ran
};

// Host timings of one run on the CPU, after `warmup` runs.
TracedMode trace_on_cpu(const Graph& graph, const ModeSpec& mode, const std::vector<c10::IValue>& arguments,
                        const std::vector<NodeCost>& costs, const TraceOptions& options) {
  TracedMode traced{std::string(mode.name)};
  traced.spans.resize(graph.size());
  bool recording = false;
  std::function<std::vector<c10::IValue>()> run;
  std::shared_ptr<void> keep;
  if (!mode.planned) {
    auto eager = std::make_shared<EagerExecutor>(graph, c10::kCPU);
    Clock::time_point last;
    eager->set_observer([&](NodeId id, const auto&, const auto&) {
      const Clock::time_point now = Clock::now();
      if (recording) traced.spans[id] = {id, 0, last, now};
      last = now;
    });
    run = [&, eager] {
      last = Clock::now();
      return eager->run(arguments);
    };
    keep = eager;
  } else {
    PlanOptions plan_options = mode.plan;
    plan_options.max_streams = options.max_streams.value_or(0);
    Plan plan = make_plan(graph, plan_options, costs);
    traced.lanes = std::max(plan.stream_count, 1);
    const std::vector<int> stream_of = plan.stream_of;
    CpuExecutorOptions executor_options;
    executor_options.on_node_done = [&traced, &recording, stream_of](NodeId id, Clock::time_point start,
                                                                     Clock::time_point end) {
      // Each node is reported once per run, from one thread: its own slot needs no lock.
      if (recording) traced.spans[id] = {id, std::max(stream_of[id], 0), start, end};
    };
    auto executor = std::make_shared<CpuParallelExecutor>(graph, std::move(plan), executor_options);
    run = [&arguments, executor] { return executor->run(arguments); };
    keep = executor;
  }
  for (int i = 0; i < options.warmup; ++i) run();
  recording = true;
  traced.started = Clock::now();
  run();
  traced.finished = Clock::now();
  recording = false;
  return traced;
}

double microseconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

// Chrome's trace event format: a process per mode, a thread per stream, a complete event per node;
// times from each mode's own start, so the modes line up at zero.
nlohmann::json chrome_trace(const LoadedModel& model, const std::vector<TracedMode>& modes, const std::string& device) {
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
                        {"args", {{"name", fmt::format("stream {}", lane)}}}});
    }
    for (const Span& span : mode.spans) {
      if (span.node < 0) continue;
      events.push_back({{"name", model.graph.node(span.node).kind},
                        {"cat", "node"},
                        {"ph", "X"},
                        {"pid", pid},
                        {"tid", span.lane},
                        {"ts", microseconds(mode.started, span.start)},
                        {"dur", microseconds(span.start, span.end)},
                        {"args", {{"node", span.node}, {"stream", span.lane}}}});
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"model", model.path}, {"device", device}, {"source", "host timings"}}}};
}

void run_trace(const TraceOptions& options) {
  std::FILE* table = table_stream(options.out, options.csv);
  for (const std::string& mode : options.modes) mode_spec(mode);
  if (options.device != "cpu") {
    throw Error(
        "trace --device cuda records kernels with CUPTI, which this build does not do yet; trace on the CPU (host "
        "timings per node) with --device cpu");
  }
  const LoadedModel model = load_model(options.model);
  const RunInputs inputs = prepare_inputs(model, options.input_shape, std::nullopt);
  const std::vector<c10::IValue> arguments(inputs.inputs.begin(), inputs.inputs.end());
  const ModelCosts costs = model_costs(model.graph, inputs.inputs);

  std::vector<TracedMode> traced;
  {
    Progress progress("tracing", options.modes.size());
    for (const std::string& mode : options.modes) {
      traced.push_back(trace_on_cpu(model.graph, mode_spec(mode), arguments, costs.costs, options));
      progress.advance();
    }
  }
  fmt::print(table, "model   {}\ndevice  cpu (host timings of one run per mode)\n\n", model.path);
  fmt::print(table, "{:<11} {:>9} {:>7} {:>7} {:>12}\n", "mode", "run ms", "nodes", "lanes", "concurrency");
  std::vector<nlohmann::json> rows;
  for (const TracedMode& mode : traced) {
    double busy_us = 0;
    std::size_t nodes = 0;
    for (const Span& span : mode.spans) {
      if (span.node < 0) continue;
      busy_us += microseconds(span.start, span.end);
      ++nodes;
      rows.push_back({{"mode", mode.name},
                      {"node", span.node},
                      {"kind", model.graph.node(span.node).kind},
                      {"stream", span.lane},
                      {"start_us", microseconds(mode.started, span.start)},
                      {"duration_us", microseconds(span.start, span.end)}});
    }
    const double run_us = microseconds(mode.started, mode.finished);
    // Node time over wall time: above 1 when nodes overlapped.
    fmt::print(table, "{:<11} {:>9.3f} {:>7} {:>7} {:>11.2f}x\n", mode.name, run_us / 1000, nodes, mode.lanes,
               run_us > 0 ? busy_us / run_us : 0.0);
  }
  if (!options.out.empty()) {
    write_json(chrome_trace(model, traced, "cpu"), options.out);
    if (options.out != "-")
      fmt::print(table, "\ntrace   {} (open in https://ui.perfetto.dev or chrome://tracing)\n", options.out);
  }
  if (!options.csv.empty()) write_csv(rows, {"mode", "node", "kind", "stream", "start_us", "duration_us"}, options.csv);
}

}  // namespace

void add_trace_command(CLI::App& app) {
  auto options = std::make_shared<TraceOptions>();
  CLI::App* trace = app.add_subcommand("trace", "Record a timeline of one run per mode as a Chrome / Perfetto trace");
  trace->add_option("--model,-m", options->model, "model file (.pt or .pt2) or name in torchscript_models/")
      ->required();
  trace->add_option("--device", options->device, "cpu (host timings per node)")->check(CLI::IsMember({"cpu", "cuda"}));
  trace->add_option("--modes", options->modes, "comma-separated modes: eager, sequential, nimble, opara")
      ->delimiter(',');
  trace->add_option("--out,-o", options->out, "the trace JSON ('-' for stdout)")->required();
  trace->add_option("--csv", options->csv, "also write one row per node run as CSV ('-' for stdout)");
  trace->add_option("--warmup,-w", options->warmup, "untraced runs first")->check(CLI::NonNegativeNumber);
  trace->add_option("--max-streams", options->max_streams, "merge streams past this many (0: no cap)")
      ->check(CLI::NonNegativeNumber);
  trace->add_option("--input-shape", options->input_shape,
                    "inputs for a model without a sidecar JSON: SHAPE or NAME:SHAPE[:DTYPE],...");
  trace->callback([options] { run_trace(*options); });
}

}  // namespace opara::bench
