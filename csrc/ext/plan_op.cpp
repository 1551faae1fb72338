// torch.ops.opara.plan and plan_archive: a model's schedule as JSON, without compiling it, from a
// file or from an archive in memory; region_plan: the plan that cuts Inductor's regions.
#include <torch/library.h>
#include <nlohmann/json.hpp>

#include <limits>

#include "ext/archive_bytes.h"
#include "ext/text_options.h"
#include "opara/compiled_model.h"
#include "opara/load.h"
#include "opara/model_profiler.h"
#include "opara/options.h"
#include "opara/plan.h"

namespace opara::ext {
namespace {

// Costs from `profile`, else from shapes recorded on the examples, else from the op table.
std::string plan_graph(const Graph& graph, const std::optional<std::vector<at::Tensor>>& example_inputs,
                       const Options& options) {
  const std::vector<at::Tensor> examples = example_inputs.value_or(std::vector<at::Tensor>{});
  // Shapes are recorded where the model runs: a copy of every weight to the host would cost more
  // than the run, and a CUDA model's decomposition may hold CUDA-only ops. Without examples nothing
  // runs, and a plan for a GPU can be made where there is none.
  std::optional<c10::Device> device;
  if (!examples.empty()) device = model_device(options, examples, graph.source_path);
  const ModelCosts costs = model_costs(graph, examples, options.costs, device);
  Plan plan = make_plan(graph, options.plan, costs.costs);
  plan.cost_source = costs.source;
  return to_json(graph, plan);
}

std::string plan_model(const std::string& path, const std::optional<std::vector<at::Tensor>>& example_inputs,
                       const std::optional<c10::Dict<std::string, std::string>>& options) {
  return plan_graph(load(path), example_inputs, options_from_dict(options));
}

// An archive held in memory (as torch.classes.opara.Model.from_archive takes it); `name` stands
// for the file in errors.
std::string plan_archive(const at::Tensor& archive, const std::string& name,
                         const std::optional<std::vector<at::Tensor>>& example_inputs,
                         const std::optional<c10::Dict<std::string, std::string>>& options) {
  return plan_graph(load_archive(archive_bytes(archive, name), name), example_inputs, options_from_dict(options));
}

// The plan that cuts Inductor's regions (kernels="inductor", python/opara/_regions.py), which
// with_compiled_regions then runs. On the CPU, unless the user gives region_min_share, one stream
// and every region merged that can be, so that the whole program is one region, the writes of
// state inside it (a compiled region writes the state where it lives): with calls
// at 1 us the plan's regions ran level with Inductor, and one region faster, since two cores'
// overlap of small kernels does not beat Inductor's intra-op threads over the same kernels fused
// across the region edges (docs/benchmarks.md, "Regions compiled by Inductor"); "region_threads"
// says the threads that worker runs them with. On a GPU the plan's streams and regions.
std::string region_plan(const at::Tensor& archive, const std::string& name,
                        const std::vector<at::Tensor>& example_inputs,
                        const std::optional<c10::Dict<std::string, std::string>>& options_dict) {
  const Graph graph = load_archive(archive_bytes(archive, name), name);
  Options options = options_from_dict(options_dict);
  options.plan.regions = true;
  const bool share_given = options_dict && options_dict->contains("region_min_share");
  if (model_device(options, example_inputs, graph.source_path).is_cpu() && !share_given) {
    options.plan.streams = StreamPolicy::kSingle;
    options.plan.region_min_share = std::numeric_limits<double>::infinity();
    nlohmann::json plan = nlohmann::json::parse(plan_graph(graph, std::nullopt, options));  // no costs to measure
    // One stream: every region runs on the one worker, so Inductor compiles its kernels for that
    // worker's threads (python/opara/_regions.py) and leaves a kernel serial where it has too little
    // work for them, as for itself; sized at run time, each kernel opened a parallel region.
    plan["region_threads"] = cpu_worker_threads(options, 1);
    return plan.dump();
  }
  return plan_graph(graph, example_inputs, options);  // regions on streams of differing threads
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(opara, m) {
  m.def("plan(str path, Tensor[]? example_inputs=None, Dict(str, str)? options=None) -> str", &plan_model);
  m.def("plan_archive(Tensor archive, str name, Tensor[]? example_inputs=None, Dict(str, str)? options=None) -> str",
        &plan_archive);
  m.def("region_plan(Tensor archive, str name, Tensor[] example_inputs, Dict(str, str)? options=None) -> str",
        &region_plan);
}

}  // namespace opara::ext
