#include "opara/model_profiler.h"

#include <c10/util/Exception.h>

#include <filesystem>

#include "exec/record_shapes.h"
#include "exec/state_buffers.h"
#include "graph/graph_analysis.h"
#include "opara/profile.h"
#include "profiler/device_limits.h"

namespace opara {
namespace {

// What a profile must have been made for to plan this model on these examples.
ProfileMatch profile_match(const Graph& graph, const std::vector<at::Tensor>& examples, const CostOptions& options,
                           std::optional<c10::Device> device) {
  ProfileMatch match;
  match.allow_mismatch = options.allow_profile_mismatch;
  match.warn = [](const std::string& warning) { TORCH_WARN(warning); };
  if (std::filesystem::is_regular_file(graph.source_path)) match.model_hash = hash_model_file(graph.source_path);
  match.model_structure = hash_graph_structure(graph);
  if (!examples.empty()) {
    std::vector<ProfileInput> inputs;
    for (const at::Tensor& example : examples) {
      inputs.push_back(ProfileInput{example.sizes().vec(), c10::toString(example.scalar_type())});
    }
    match.inputs = std::move(inputs);
  }
  if (device && device->is_cuda()) match.device = device_limits(device->index());
  return match;
}

// One run of `examples` on `device`, recording every node's shapes. On the model's device: a copy of
// every input (weights too, for a torch.compile graph) to the host would cost more than the run,
// and a graph exported from CUDA tensors runs there as well. What the model writes is copied first.
std::vector<NodeShapes> shapes_on_examples(const Graph& graph, const std::vector<at::Tensor>& examples,
                                           c10::Device device) {
  const std::vector<bool> written = inputs_written_in_place(graph);
  std::vector<c10::IValue> inputs;
  for (std::size_t i = 0; i < examples.size(); ++i) {
    inputs.emplace_back(i < written.size() && written[i] ? examples[i].clone() : examples[i]);
  }
  if (examples.size() == graph.caller_input_count()) {  // the caller's inputs: the state buffers' first values follow
    for (const at::Tensor& value : initial_state(graph, device)) inputs.emplace_back(value);
  }
  return record_shapes(graph, inputs, device);
}

}  // namespace

ModelCosts model_costs(const Graph& graph, const std::vector<at::Tensor>& examples, const CostOptions& options,
                       std::optional<c10::Device> device) {
  ModelCosts costs;
  if (!options.profile.empty()) {
    costs.costs = costs_from_profile(graph, options.profile, profile_match(graph, examples, options, device));
    costs.source = "profile";
  }
  if (!examples.empty()) costs.shapes = shapes_on_examples(graph, examples, device.value_or(c10::kCPU));
  if (options.profile.empty()) {
    costs.costs = estimate_costs(graph, costs.shapes, options.ridge_point);
    costs.source = examples.empty() ? "none" : "shapes";
  }
  return costs;
}

}  // namespace opara
