#include "model_loading.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "opara/error.h"
#include "opara/reference_forward.h"

namespace opara::bench {

std::string resolve_model_path(const std::string& model) {
  namespace fs = std::filesystem;
  if (fs::exists(model) || model.find('/') != std::string::npos || fs::path(model).has_extension()) return model;
  const char* folder = std::getenv("OPARA_MODELS");
  return (fs::path(folder ? folder : "torchscript_models") / (model + "_b1.pt")).string();
}

LoadedModel load_model(const std::string& model) {
  LoadedModel loaded;
  loaded.path = resolve_model_path(model);
  loaded.format = detect_format(loaded.path);
  const auto started = std::chrono::steady_clock::now();
  loaded.graph = load(loaded.path);
  loaded.import_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  const std::string sidecar = sidecar_path(loaded.path);
  if (std::filesystem::exists(sidecar)) loaded.spec = read_model_spec(sidecar);
  return loaded;
}

RunInputs prepare_inputs(const LoadedModel& model, const std::string& input_shape, std::optional<std::uint64_t> seed,
                         std::optional<std::int64_t> batch) {
  RunInputs run;
  const bool script = model.format == ModelFormat::kTorchScript;
  if (input_shape.empty() && !seed && !batch && model.spec && !model.spec->reference.empty() &&
      std::filesystem::exists(model.spec->reference)) {
    Reference reference = load_reference(model.spec->reference);
    run.inputs = std::move(reference.inputs);
    run.expected = script ? std::move(reference.outputs_pt) : std::move(reference.outputs_pt2);
    run.origin = fmt::format("reference inputs and outputs of {}", model.spec->reference);
    return run;
  }
  std::vector<InputSpec> specs;
  if (!input_shape.empty()) {
    specs = parse_input_shapes(input_shape);
  } else if (model.spec) {
    specs = model.spec->inputs;
  } else {
    throw Error(
        fmt::format("{}: no sidecar {} describes the inputs; give them with --input-shape, e.g. "
                    "--input-shape x:1x3x224x224",
                    model.path, sidecar_path(model.path)));
  }
  if (batch) {
    for (InputSpec& spec : specs) {
      if (!spec.shape.empty()) spec.shape[0] = *batch;
    }
  }
  run.inputs = make_inputs(specs, seed.value_or(model.spec ? model.spec->seed : 0));
  if (script) {
    run.expected = torchscript_forward(model.path, run.inputs);
    run.origin = "random inputs; expected outputs from the TorchScript module's forward";
  } else {
    run.origin = "random inputs; a .pt2 has no forward to compare against outside the exporter's reference";
  }
  return run;
}

}  // namespace opara::bench
