// torch.ops.opara.plan and plan_archive: a model's schedule as JSON, without compiling it, from a
// file or from an archive in memory.
#include <torch/library.h>

#include "ext/archive_bytes.h"
#include "ext/text_options.h"
#include "opara/load.h"
#include "opara/model_profiler.h"
#include "opara/options.h"
#include "opara/plan.h"

namespace opara::ext {
namespace {

// Costs from `profile`, else from shapes recorded on the examples, else from the op table.
std::string plan_graph(const Graph& graph, const std::optional<std::vector<at::Tensor>>& example_inputs,
                       const std::optional<c10::Dict<std::string, std::string>>& options_dict) {
  const Options options = options_from_dict(options_dict);
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
  return plan_graph(load(path), example_inputs, options);
}

// An archive held in memory (as torch.classes.opara.Model.from_archive takes it); `name` stands
// for the file in errors.
std::string plan_archive(const at::Tensor& archive, const std::string& name,
                         const std::optional<std::vector<at::Tensor>>& example_inputs,
                         const std::optional<c10::Dict<std::string, std::string>>& options) {
  return plan_graph(load_archive(archive_bytes(archive, name), name), example_inputs, options);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(opara, m) {
  m.def("plan(str path, Tensor[]? example_inputs=None, Dict(str, str)? options=None) -> str", &plan_model);
  m.def("plan_archive(Tensor archive, str name, Tensor[]? example_inputs=None, Dict(str, str)? options=None) -> str",
        &plan_archive);
}

}  // namespace opara::ext
