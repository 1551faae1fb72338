#include "info_command.h"

#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <memory>

#include "csv_output.h"
#include "graph/graph_analysis.h"
#include "json_output.h"
#include "model_flags.h"
#include "model_loading.h"
#include "opara/error.h"
#include "opara/profile.h"
#include "support/text_file.h"

namespace opara::bench {
namespace {

struct InfoOptions {
  std::string model;
  std::string dtype;  // --dtype: empty, as exported
  std::string json;
  std::string csv;
  std::string dot;
};

void run_info(const InfoOptions& options) {
  std::FILE* table = table_stream({{"--json", options.json}, {"--csv", options.csv}});
  const LoadedModel model = load_model(options.model, options.dtype);
  const Graph& graph = model.graph;
  std::size_t data_edges = 0;
  std::size_t kernels = 0;
  std::size_t writers = 0;
  std::size_t not_capturable = 0;
  std::map<std::string, std::size_t> kinds;
  for (const Edge& edge : graph.edges()) data_edges += edge.kind == EdgeKind::kData;
  for (const Node& node : graph.nodes()) {
    kernels += node.has(kLaunchesKernel);
    writers += node.has(kWritesInput);
    not_capturable += node.has(kNotCapturable);
    ++kinds[node.kind];
  }
  const std::size_t graph_width = width(graph);
  const CriticalPath path = critical_path(graph);
  const std::size_t reduced = transitive_reduction(graph).size();

  fmt::print(table, "model          {}\n", model.path);
  fmt::print(table, "format         {}\n", model.format == ModelFormat::kTorchScript ? "TorchScript" : "torch.export");
  fmt::print(table, "import         {:.1f} ms\n", model.import_ms);
  fmt::print(table, "inputs         {}{}\n", graph.caller_input_count(),
             graph.state().empty() ? "" : fmt::format(" (and {} state buffers the model keeps)", graph.state().size()));
  fmt::print(table, "outputs        {}\n", graph.outputs().size());
  fmt::print(table, "structure      {} (what a profile of it records: the same for a model exported again)\n",
             hash_graph_structure(graph));
  fmt::print(table, "nodes          {} ({} launch kernels, estimate)\n", graph.size(), kernels);
  fmt::print(table, "edges          {} ({} data, {} ordering; {} after transitive reduction)\n", graph.edges().size(),
             data_edges, graph.edges().size() - data_edges, reduced);
  fmt::print(table, "in-place ops   {}\n", writers);
  fmt::print(table, "host syncs     {} (cannot be captured in a CUDA graph)\n", not_capturable);
  fmt::print(table, "width          {}\n", graph_width);
  fmt::print(table, "critical path  {} nodes\n\n", path.nodes.size());
  std::vector<std::pair<std::string, std::size_t>> sorted(kinds.begin(), kinds.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  fmt::print(table, "{:<36} {:>6}\n", "op kind", "count");
  for (const auto& [kind, count] : sorted) fmt::print(table, "{:<36} {:>6}\n", kind, count);
  if (!options.dot.empty()) write_text_file(options.dot, to_dot(graph), "the DOT file");
  if (!options.json.empty() || !options.csv.empty()) {
    nlohmann::json json = {
        {"model", model.path},
        {"format", model.format == ModelFormat::kTorchScript ? "torchscript" : "export"},
        {"import_ms", model.import_ms},
        {"inputs", graph.caller_input_count()},
        {"state_buffers", graph.state().size()},
        {"outputs", graph.outputs().size()},
        {"nodes", graph.size()},
        {"kernel_nodes", kernels},
        {"edges", graph.edges().size()},
        {"data_edges", data_edges},
        {"ordering_edges", graph.edges().size() - data_edges},
        {"reduced_edges", reduced},
        {"inplace_nodes", writers},
        {"not_capturable_nodes", not_capturable},
        {"width", graph_width},
        {"critical_path", path.nodes.size()},
        {"op_kinds", kinds},
    };
    if (!options.json.empty()) write_json(json, options.json);
    if (!options.csv.empty()) write_csv({json}, {"model", "format"}, options.csv);  // op_kinds: --json
  }
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto options = std::make_shared<InfoOptions>();
  CLI::App* info = app.add_subcommand("info", "Describe a model's operator graph");
  add_model_flags(info, options->model, options->dtype);
  info->add_option("--json", options->json, "also write the figures as JSON to this file ('-' for stdout)");
  info->add_option("--csv", options->csv, "also write the figures as one CSV row to this file ('-' for stdout)");
  info->add_option("--dot", options->dot, "write the graph as Graphviz DOT to this file (ordering edges dashed)");
  info->callback([options] { run_info(*options); });
}

}  // namespace opara::bench
