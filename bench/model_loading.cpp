#include "model_loading.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "opara/error.h"
#include "tools/reference_forward.h"

namespace opara::bench {

namespace {

bool names_a_model(const std::string& model) {
  namespace fs = std::filesystem;
  return !fs::exists(model) && model.find('/') == std::string::npos && !fs::path(model).has_extension();
}

std::string exported_name(const std::string& model, const std::string& dtype) {
  return dtype.empty() || dtype == "float32" ? model : fmt::format("{}_{}", model, dtype);
}

}  // namespace

const std::vector<std::string>& model_dtypes() {
  static const std::vector<std::string> dtypes = {"float32", "float16", "bfloat16"};
  return dtypes;
}

std::string resolve_model_path(const std::string& model, const std::string& dtype) {
  if (!names_a_model(model)) return model;
  const char* folder = std::getenv("OPARA_MODELS");
  return (std::filesystem::path(folder ? folder : "torchscript_models") / (exported_name(model, dtype) + "_b1.pt"))
      .string();
}

LoadedModel load_model(const std::string& model, const std::string& dtype) {
  LoadedModel loaded;
  loaded.path = resolve_model_path(model, dtype);
  if (names_a_model(model) && !std::filesystem::exists(loaded.path)) {
    throw Error(fmt::format(
        "{}: model {} is not exported{}; export it with scripts/export_models.py --models {}{} "
        "--out {}, or give a model file",
        loaded.path, model, dtype.empty() ? "" : " in " + dtype, model, dtype.empty() ? "" : " --dtype " + dtype,
        std::filesystem::path(loaded.path).parent_path().string()));
  }
  loaded.format = detect_format(loaded.path);
  const auto started = std::chrono::steady_clock::now();
  loaded.graph = load(loaded.path);
  loaded.import_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  const std::string sidecar = sidecar_path(loaded.path);
  if (std::filesystem::exists(sidecar)) loaded.spec = read_model_spec(sidecar);
  loaded.dtype = !dtype.empty() ? dtype : loaded.spec ? loaded.spec->dtype : "float32";
  if (loaded.spec && loaded.spec->dtype != loaded.dtype) {
    const std::string name = loaded.spec->model.empty() ? "NAME" : loaded.spec->model;
    throw Error(fmt::format(
        "{}: exported in {} (its sidecar {} says so), not {}; --dtype converts nothing, it picks the export. "
        "Export the model in {} with scripts/export_models.py --models {} --dtype {} --out {} and give {}, or "
        "leave --dtype out",
        loaded.path, loaded.spec->dtype, sidecar, dtype, dtype, name, dtype,
        std::filesystem::path(loaded.path).parent_path().string(),
        (std::filesystem::path(loaded.path).parent_path() /
         fmt::format("{}_b{}{}", exported_name(name, dtype), loaded.spec->batch,
                     std::filesystem::path(loaded.path).extension().string()))
            .string()));
  }
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
    specs = parse_input_shapes(input_shape, model.dtype);
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
