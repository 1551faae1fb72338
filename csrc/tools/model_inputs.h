#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace opara {

// One model input as the sidecar JSON describes it.
struct InputSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  std::string dtype;                                           // "float32", "int64", ...
  std::optional<std::pair<std::int64_t, std::int64_t>> range;  // [low, high) for integer inputs
};

// The sidecar <model>.json that scripts/export_models.py writes next to each model.
struct ModelSpec {
  std::string model;
  std::int64_t batch = 1;
  std::string source;
  std::uint64_t seed = 0;
  std::vector<InputSpec> inputs;
  std::string dtype = "float32";        // what the weights and floating-point inputs were exported in
  std::string reference;                // path of the .ref.pt file, resolved against the JSON's folder; may be empty
  std::optional<int> intra_op_threads;  // the reference's intra-op threads, when the exporter said
};

// "<folder>/<stem>.json" for "<folder>/<stem>.pt" or ".pt2".
std::string sidecar_path(const std::string& model_path);

// Reads a sidecar; throws opara::Error naming the file and the field when it is malformed.
ModelSpec read_model_spec(const std::string& json_path);

// Parses "--input-shape" text: "1x3x224x224" or "x:1x3x224x224,mask:1x32:int64" (name, shape,
// optional dtype, `default_dtype` when left out). Integer inputs get the range [0, 2).
std::vector<InputSpec> parse_input_shapes(const std::string& text, const std::string& default_dtype = "float32");

// Random inputs from a seed, by the same recipe as scripts/export_models.py (one CPU generator
// seeded once; randn for floats, randint(low, high) for integers, in input order), so the same
// seed gives the same tensors in Python and C++.
std::vector<at::Tensor> make_inputs(const std::vector<InputSpec>& specs, std::uint64_t seed);

// The reference the exporter recorded: inputs, and the outputs of the TorchScript forward and of
// the exported program's module on them.
struct Reference {
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> outputs_pt;
  std::vector<at::Tensor> outputs_pt2;
};

Reference load_reference(const std::string& path);

}  // namespace opara
