#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

#include "opara/graph.h"
#include "opara/load.h"
#include "tools/model_inputs.h"

namespace opara::bench {

// What --model, --dtype and --input-shape resolve to.
struct LoadedModel {
  std::string path;
  ModelFormat format = ModelFormat::kTorchScript;
  Graph graph;
  double import_ms = 0;
  std::optional<ModelSpec> spec;  // from the sidecar JSON, when there is one
  std::string dtype;              // the weights' and floating-point inputs': the sidecar's, or --dtype
};

// The dtypes --dtype takes: those scripts/export_models.py exports models in.
const std::vector<std::string>& model_dtypes();

// --model takes a path, or a model name looked up as <models dir>/<name>_b1.pt (the models dir
// is $OPARA_MODELS or ./torchscript_models); with `dtype` other than float32 (--dtype), the name's
// export in that dtype: <models dir>/<name>_<dtype>_b1.pt.
std::string resolve_model_path(const std::string& model, const std::string& dtype = "");

// Loads what --model names. `dtype` (--dtype; empty: the file as it is) must be what the model was
// exported in: nothing is converted, since a model traced in float32 keeps float32 in its code (an
// attention mask's fill value, say). Throws opara::Error saying how to export it otherwise.
LoadedModel load_model(const std::string& model, const std::string& dtype = "");

// The inputs to run on and, when known, the model's own outputs for them: the exporter's
// reference inputs by default, random ones from --input-shape (or the sidecar with --seed).
struct RunInputs {
  std::vector<at::Tensor> inputs;
  std::optional<std::vector<at::Tensor>> expected;
  std::string origin;  // where the inputs and expected outputs came from, for the report
};

// `batch`: random inputs, the first dimension of each sidecar shape replaced.
RunInputs prepare_inputs(const LoadedModel& model, const std::string& input_shape, std::optional<std::uint64_t> seed,
                         std::optional<std::int64_t> batch = std::nullopt);

}  // namespace opara::bench
