#include "plan_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "csv_output.h"
#include "graph/graph_analysis.h"
#include "json_output.h"
#include "memory_budget_flag.h"
#include "model_flags.h"
#include "model_loading.h"
#include "number_checks.h"
#include "opara/error.h"
#include "overflow_flags.h"
#include "overflow_report.h"
#include "planning.h"
#include "schedule/pool_estimate.h"
#include "support/text_file.h"
#include "svg_render.h"
#include "tuning/measured_choice.h"

namespace opara::bench {
namespace {

struct PlanCommandOptions {
  std::string model;
  std::string dtype;  // --dtype: empty, as exported
  std::string allocator = "opara";
  std::string order = "opara";
  int max_streams = 0;
  bool regions = false;  // --regions
  double region_min_share = kDefaultRegionMinShare;
  CostOptions costs;  // --profile, --ridge, --allow-profile-mismatch
  std::string input_shape;
  bool check = false;
  std::string json;
  std::string csv;
  std::string dot;
  std::string svg;
  OverflowOptions overflow;    // --overflow, --alpha-us, --cpu-nodes
  bool show_overflow = false;  // --overflow given
  // --memory-budget: CudaOptions::memory_budget, as options_from_text takes it.
  std::string memory_budget = kDefaultMemoryBudget;
  std::string payoff = "gpu";  // --payoff
};

constexpr std::size_t kLaunchOrderHead = 12;

// One row per node, in launch order: where it runs and what it waits for.
std::vector<nlohmann::json> node_rows(const Graph& graph, const Plan& plan) {
  std::vector<nlohmann::json> rows;
  for (std::size_t position = 0; position < plan.launch_order.size(); ++position) {
    const NodeId id = plan.launch_order[position];
    const int stream = plan.stream_of[id];
    rows.push_back({{"launch", position},
                    {"node", id},
                    {"kind", graph.node(id).kind},
                    {"stream", stream == kNoStream ? nlohmann::json("host") : nlohmann::json(stream)},
                    {"waits_on", plan.waits[id]},
                    {"records_event", static_cast<bool>(plan.records[id])}});
    if (!plan.region_of.empty()) {
      const int region = plan.region_of[id];
      rows.back()["region"] = region == kNoRegion ? nlohmann::json(nullptr) : nlohmann::json(region);
    }
  }
  return rows;
}

// What `plan` reports of a model's plan, for the table and the JSON alike.
struct PlannedModel {
  const LoadedModel& model;
  std::string cost_source;  // ModelCosts::source: "profile", "shapes" or "none"
  TimedPlan timed;
  std::size_t kernels = 0;            // nodes that launch kernels
  std::size_t critical_path = 0;      // nodes on it
  std::vector<std::string> problems;  // with --check: what validate() found
  // Why the plan has its streams: how many the policy opened, how many of those could not pay for
  // their events and were merged, and how many the cap (or --regions) merged after that.
  int streams_opened = 0;
  int streams_unpaying = 0;
  int streams_capped = 0;
  // The CUDA graph pool estimated from the recorded shapes (all zero without example inputs): the
  // plan's under record-stream and keep-alive, the sequential graph's, the cuBLAS workspaces of
  // each (Hopper's size a stream), the memory budget's bytes and the cap compile() would put on the
  // plan to fit it (0: none needed).
  PoolEstimate pool;
  PoolEstimate pool_keep_alive;
  std::size_t sequential_pool_bytes = 0;
  std::size_t workspace_bytes = 0;
  std::size_t sequential_workspace_bytes = 0;
  std::size_t budget_bytes = 0;
  int budget_stream_cap = 0;
};

// What compile() on a GPU would estimate of the plan's memory pool, and the cap its budget asks.
void estimate_memory(PlannedModel& planned, const PlanOptions& plan_options, const ModelCosts& costs,
                     const std::string& memory_budget) {
  if (costs.shapes.empty()) return;
  const Graph& graph = planned.model.graph;
  const Plan& plan = planned.timed.plan;
  planned.pool = estimate_pool(graph, plan, costs.shapes, CaptureHold::kRecordStream);
  planned.pool_keep_alive = estimate_pool(graph, plan, costs.shapes, CaptureHold::kKeepAlive);
  planned.workspace_bytes = estimate_blas_workspaces(graph, plan, kHopperBlasWorkspaceBytes);
  const BudgetFit fit = fit_to_budget(graph, plan_options, costs.costs, costs.shapes,
                                      options_from_text({{"memory_budget", memory_budget}}).cuda.memory_budget,
                                      CaptureHold::kRecordStream, kHopperBlasWorkspaceBytes);
  planned.sequential_pool_bytes = fit.sequential_estimate_bytes;
  planned.sequential_workspace_bytes = fit.sequential_workspace_estimate_bytes;
  planned.budget_bytes = fit.budget_bytes;
  planned.budget_stream_cap = fit.stream_cap;
}

PlannedModel plan_model(const LoadedModel& model, const std::vector<at::Tensor>& inputs,
                        const PlanCommandOptions& options) {
  PlanOptions plan_options{parse_stream_policy(options.allocator), parse_order_policy(options.order),
                           options.max_streams, options.regions, options.region_min_share};
  const ModelCosts costs = model_costs(model.graph, inputs, options.costs);
  if (options.payoff == "gpu") plan_options.payoff = costs.gpu_payoff();  // as compile() on a GPU
  PlannedModel planned{
      model, costs.source, timed_plan(model.graph, plan_options, costs), 0, 0, {}, 0, 0, 0, {}, {}, 0, 0, 0, 0, 0};
  PlanOptions opened = plan_options;
  opened.max_streams = 0;
  opened.regions = false;
  const int paying = make_plan(model.graph, opened, costs.costs).stream_count;
  opened.payoff = {};
  planned.streams_opened = make_plan(model.graph, opened, costs.costs).stream_count;
  planned.streams_unpaying = planned.streams_opened - paying;
  planned.streams_capped = paying - planned.timed.plan.stream_count;
  for (const Node& node : model.graph.nodes()) planned.kernels += node.has(kLaunchesKernel);
  planned.critical_path = critical_path(model.graph).nodes.size();
  if (options.check) planned.problems = validate(model.graph, planned.timed.plan);
  estimate_memory(planned, plan_options, costs, options.memory_budget);
  return planned;
}

void print_plan_summary(std::FILE* table, const PlannedModel& planned, bool check) {
  const Plan& plan = planned.timed.plan;
  fmt::print(table, "model          {}\n", planned.model.path);
  fmt::print(table, "policy         streams {}, order {}, max streams {}, costs from {}\n",
             to_string(plan.stream_policy), to_string(plan.order_policy),
             plan.max_streams == 0 ? "unlimited" : std::to_string(plan.max_streams),
             planned.cost_source == "none" ? "the op table alone (no example inputs)" : planned.cost_source);
  fmt::print(table, "nodes          {} ({} launch kernels)\n", planned.model.graph.size(), planned.kernels);
  fmt::print(table,
             "streams        {} (the policy opened {}; {} merged that could not pay for their events; {} merged by the "
             "cap or regions)\n",
             plan.stream_count, planned.streams_opened, planned.streams_unpaying, planned.streams_capped);
  if (!plan.region_of.empty()) fmt::print(table, "regions        {}\n", plan.region_count);
  fmt::print(table, "events         {} waits on {} recorded events ({} before reduction)\n", plan.wait_count(),
             plan.event_count(), plan.events_unreduced);
  fmt::print(table, "critical path  {} nodes\n", planned.critical_path);
  if (planned.sequential_pool_bytes > 0) {
    const auto mib = [](std::size_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
    fmt::print(
        table,
        "CUDA pool      {:.1f} MiB estimated ({:.2f}x the sequential graph's {:.1f} MiB; keep-alive {:.1f} MiB)\n",
        mib(planned.pool.pool_bytes),
        static_cast<double>(planned.pool.pool_bytes) / static_cast<double>(planned.sequential_pool_bytes),
        mib(planned.sequential_pool_bytes), mib(planned.pool_keep_alive.pool_bytes));
    fmt::print(table,
               "cuBLAS         {:.0f} MiB of workspaces estimated (the sequential graph's {:.0f} MiB; {} MiB a stream "
               "that runs a product, Hopper's)\n",
               mib(planned.workspace_bytes), mib(planned.sequential_workspace_bytes), kHopperBlasWorkspaceBytes >> 20);
    fmt::print(table, "memory budget  {:.1f} MiB for the pool and workspaces: {}\n", mib(planned.budget_bytes),
               planned.budget_stream_cap == 0
                   ? std::string("the plan fits")
                   : fmt::format("compile() caps the plan at {} streams to fit", planned.budget_stream_cap));
  }
  fmt::print(table, "plan time      {:.1f} us (allocation + events + order, median of 25)\n", planned.timed.plan_us);
  if (!check) return;
  fmt::print(table, "check          {}\n",
             planned.problems.empty() ? "valid: every dependency is ordered, no deadlock"
                                      : fmt::format("INVALID ({} problems)", planned.problems.size()));
  for (const std::string& problem : planned.problems) fmt::print(table, "  {}\n", problem);
}

// Each stream's node count and first nodes, then the head of the launch order.
void print_streams_and_order(std::FILE* table, const Graph& graph, const Plan& plan) {
  fmt::print(table, "\n{:<7} {:>6}  {}\n", "stream", "nodes", "first nodes");
  const auto per_stream = plan.stream_nodes();
  for (std::size_t stream = 0; stream < per_stream.size(); ++stream) {
    fmt::print(table, "{:<7} {:>6}  {}\n", stream, per_stream[stream].size(), node_head(graph, per_stream[stream], 3));
  }
  fmt::print(table, "\nlaunch order   {}\n", node_head(graph, plan.launch_order, kLaunchOrderHead));
}

// The plan file (kinds and sources too) and the command's figures.
nlohmann::json plan_report(const PlannedModel& planned, const PlanCommandOptions& options,
                           const nlohmann::json& overflow) {
  const Plan& plan = planned.timed.plan;
  nlohmann::json report = nlohmann::json::parse(to_json(planned.model.graph, plan));
  report["model"] = planned.model.path;
  report["kernels"] = planned.kernels;
  report["plan_us"] = planned.timed.plan_us;
  report["critical_path"] = planned.critical_path;
  std::vector<std::size_t> sizes;
  for (const auto& nodes : plan.stream_nodes()) sizes.push_back(nodes.size());
  report["nodes_per_stream"] = sizes;
  report["streams_opened"] = planned.streams_opened;
  report["streams_unpaying"] = planned.streams_unpaying;
  report["streams_capped"] = planned.streams_capped;
  if (planned.sequential_pool_bytes > 0) {
    report["pool_estimate"] = {{"bytes", planned.pool.pool_bytes},
                               {"peak_live_bytes", planned.pool.peak_live_bytes},
                               {"keep_alive_bytes", planned.pool_keep_alive.pool_bytes},
                               {"sequential_bytes", planned.sequential_pool_bytes},
                               {"workspace_bytes", planned.workspace_bytes},
                               {"sequential_workspace_bytes", planned.sequential_workspace_bytes},
                               {"budget_bytes", planned.budget_bytes},
                               {"budget_stream_cap", planned.budget_stream_cap}};
  }
  if (options.show_overflow) report["overflow"] = overflow;
  if (options.check) {
    report["valid"] = planned.problems.empty();
    report["problems"] = planned.problems;
  }
  return report;
}

void write_plan_files(const PlannedModel& planned, const PlanCommandOptions& options, const nlohmann::json& overflow) {
  const Graph& graph = planned.model.graph;
  const Plan& plan = planned.timed.plan;
  if (!options.json.empty()) write_json(plan_report(planned, options, overflow), options.json);
  if (!options.csv.empty()) {
    std::vector<std::string> columns{"launch", "node", "kind", "stream"};
    if (!plan.region_of.empty()) columns.emplace_back("region");
    write_csv(node_rows(graph, plan), columns, options.csv);
  }
  if (!options.dot.empty() || !options.svg.empty()) {
    const std::string dot = to_dot(graph, plan);
    if (!options.dot.empty()) write_text_file(options.dot, dot, "the DOT file");
    if (!options.svg.empty()) render_svg(dot, options.svg);
  }
}

void run_plan(const PlanCommandOptions& options) {
  std::FILE* table =
      table_stream({{"--json", options.json}, {"--csv", options.csv}, {"--dot", options.dot}, {"--svg", options.svg}});
  const LoadedModel model = load_model(options.model, options.dtype);
  const std::vector<at::Tensor> inputs = planning_inputs(model, options.input_shape);
  const PlannedModel planned = plan_model(model, inputs, options);
  print_plan_summary(table, planned, options.check);
  print_streams_and_order(table, model.graph, planned.timed.plan);
  nlohmann::json overflow;
  if (options.show_overflow) {
    fmt::print(table, "\noverflow       {} (alpha {} us)\n", to_string(options.overflow.policy),
               options.overflow.alpha_us);
    overflow =
        overflow_report(model, inputs, options.overflow, options.costs.profile, planned.timed.plan.stream_count, table);
  }
  write_plan_files(planned, options, overflow);
  if (!planned.problems.empty()) throw Error(fmt::format("{}: the plan is invalid (see above)", model.path));
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto options = std::make_shared<PlanCommandOptions>();
  CLI::App* plan = app.add_subcommand("plan", "Show the streams, events and launch order opara plans for a model");
  add_model_flags(plan, options->model, options->dtype);
  plan->add_option("--allocator", options->allocator, "stream allocation")
      ->check(CLI::IsMember({"opara", "opara-unhanded", "nimble", "single", "trtllm", "torchsched"}));
  plan->add_option("--order", options->order, "launch order")->check(CLI::IsMember({"opara", "topological", "trtllm"}));
  plan->add_option("--max-streams", options->max_streams, "merge streams past this many (0: no cap)")
      ->check(kNonNegative);
  plan->add_flag("--regions", options->regions,
                 "group each stream's nodes into regions (cut at cross-stream dependencies, small ones merged)");
  plan->add_option("--region-min-share", options->region_min_share,
                   "with --regions: merge a region costing less than this share of the largest beside it")
      ->check(CLI::NonNegativeNumber);
  plan->add_option("--profile", options->costs.profile, "resource demands from a recorded profile (JSON)")
      ->check(CLI::ExistingFile);
  plan->add_flag("--allow-profile-mismatch", options->costs.allow_profile_mismatch,
                 "use a profile made for another model file or input shapes, with a warning");
  plan->add_option("--ridge", options->costs.ridge_point,
                   "FLOPs per byte above which an op counts as compute-bound (static estimate)")
      ->check(kPositive);
  plan->add_option("--input-shape", options->input_shape,
                   "example inputs for the shape-based estimate: SHAPE or NAME:SHAPE[:DTYPE],...");
  plan->add_flag("--check", options->check, "validate the plan; exit 1 when it is wrong");
  plan->add_option("--payoff", options->payoff,
                   "merge streams whose work cannot pay for their events before the cap: gpu (compile() on a GPU, "
                   "costs from shapes) or none (every stream the policy opens)")
      ->check(CLI::IsMember({"gpu", "none"}));
  plan->add_option("--memory-budget", options->memory_budget,
                   "the CUDA pool budget the estimate is held to: a ratio to the sequential graph's (1.3x) or a "
                   "size (512MiB, 2GB, bytes)")
      ->check(memory_budget_check());
  plan->add_option("--json", options->json, "also write the plan as JSON to this file ('-' for stdout)");
  plan->add_option("--csv", options->csv, "also write one row per node (stream, waits) as CSV ('-' for stdout)");
  plan->add_option("--dot", options->dot, "write the plan as Graphviz DOT to this file (colour: stream, red: event)");
  plan->add_option("--svg", options->svg, "render the plan as SVG with Graphviz's dot (apt-get install graphviz)");
  const OverflowFlags overflow = add_overflow_flags(plan, options->overflow,
                                                    "CPU-overflow placement to show with its segments: none, comm_sd "
                                                    "(SIR+ Comm+SD, needs --profile) or manual (--cpu-nodes)");
  overflow.alpha_us->needs(overflow.policy);
  overflow.cpu_nodes->needs(overflow.policy);
  plan->callback([options, overflow] {
    options->show_overflow = overflow.policy->count() > 0;
    if (options->show_overflow) check_overflow_flags(options->overflow, options->costs.profile);
    run_plan(*options);
  });
}

}  // namespace opara::bench
