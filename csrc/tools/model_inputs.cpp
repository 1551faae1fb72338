#include "tools/model_inputs.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "exec/first_line.h"
#include "opara/error.h"

namespace opara {
namespace {

c10::ScalarType dtype_of(const std::string& name, const std::string& where) {
  static const std::vector<std::pair<std::string, c10::ScalarType>> kDtypes = {
      {"float32", c10::kFloat}, {"float16", c10::kHalf}, {"bfloat16", c10::kBFloat16}, {"float64", c10::kDouble},
      {"int64", c10::kLong},    {"int32", c10::kInt},    {"bool", c10::kBool},
  };
  for (const auto& [text, type] : kDtypes) {
    if (text == name) return type;
  }
  throw Error(fmt::format("{}: unknown dtype '{}'; use float32, float16, bfloat16, float64, int64, int32 or bool",
                          where, name));
}

std::vector<at::Tensor> tensor_list(const c10::IValue& value, const std::string& what) {
  std::vector<at::Tensor> tensors;
  if (!value.isList()) throw Error(what + " is not a list of tensors");
  for (const c10::IValue& element : value.toListRef()) tensors.push_back(element.toTensor());
  return tensors;
}

}  // namespace

std::string sidecar_path(const std::string& model_path) {
  return std::filesystem::path(model_path).replace_extension(".json").string();
}

ModelSpec read_model_spec(const std::string& json_path) {
  std::ifstream file(json_path);
  if (!file) throw Error(fmt::format("{}: cannot open the model's input description", json_path));
  ModelSpec spec;
  try {
    const auto json = nlohmann::json::parse(file);
    spec.model = json.value("model", "");
    spec.batch = json.value("batch", 1);
    spec.source = json.value("source", "");
    spec.seed = json.value("seed", 0);
    spec.dtype = json.value("dtype", "float32");
    dtype_of(spec.dtype, json_path);
    if (json.contains("intra_op_threads")) spec.intra_op_threads = json.at("intra_op_threads").get<int>();
    for (const auto& input : json.at("inputs")) {
      InputSpec in;
      in.name = input.at("name").get<std::string>();
      in.shape = input.at("shape").get<std::vector<std::int64_t>>();
      in.dtype = input.at("dtype").get<std::string>();
      dtype_of(in.dtype, json_path);
      if (input.contains("range")) {
        const auto range = input.at("range").get<std::vector<std::int64_t>>();
        if (range.size() != 2 || range[0] >= range[1]) {
          throw Error(fmt::format("{}: input {} has range {}; write [low, high) with low < high", json_path, in.name,
                                  input.at("range").dump()));
        }
        in.range = std::make_pair(range[0], range[1]);
      }
      spec.inputs.push_back(std::move(in));
    }
    if (json.contains("reference")) {
      spec.reference =
          (std::filesystem::path(json_path).parent_path() / json.at("reference").get<std::string>()).string();
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {
    throw Error(fmt::format("{}: malformed model description ({}). Write it again with scripts/export_models.py",
                            json_path, first_line(error)));
  }
  return spec;
}

std::vector<InputSpec> parse_input_shapes(const std::string& text, const std::string& default_dtype) {
  std::vector<InputSpec> specs;
  std::stringstream entries(text);
  std::string entry;
  while (std::getline(entries, entry, ',')) {
    std::vector<std::string> parts;
    std::stringstream fields(entry);
    for (std::string field; std::getline(fields, field, ':');) parts.push_back(field);
    if (parts.size() == 1) parts.insert(parts.begin(), fmt::format("input{}", specs.size()));
    if (parts.size() < 2 || parts.size() > 3) {
      throw Error(fmt::format("--input-shape '{}': write SHAPE or NAME:SHAPE[:DTYPE], e.g. x:1x3x224x224", entry));
    }
    InputSpec spec{parts[0], {}, parts.size() == 3 ? parts[2] : default_dtype, std::nullopt};
    const c10::ScalarType dtype = dtype_of(spec.dtype, "--input-shape");
    std::stringstream dims(parts[1]);
    for (std::string dim; std::getline(dims, dim, 'x');) {
      std::size_t used = 0;
      long long size = -1;
      try {
        size = std::stoll(dim, &used);
      } catch (const std::exception&) {
      }
      if (used != dim.size() || size < 0) {
        throw Error(fmt::format("--input-shape '{}': '{}' is not a size; write sizes joined by x", entry, dim));
      }
      spec.shape.push_back(size);
    }
    if (!c10::isFloatingType(dtype)) spec.range = std::make_pair(0, 2);
    specs.push_back(std::move(spec));
  }
  if (specs.empty()) throw Error("--input-shape is empty; write e.g. 1x3x224x224");
  return specs;
}

std::vector<at::Tensor> make_inputs(const std::vector<InputSpec>& specs, std::uint64_t seed) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<at::Tensor> tensors;
  for (const InputSpec& spec : specs) {
    const auto options = at::TensorOptions().dtype(dtype_of(spec.dtype, "make_inputs"));
    if (std::any_of(spec.shape.begin(), spec.shape.end(), [](std::int64_t size) { return size < 0; })) {
      throw Error(fmt::format("input {}: shape {} has a negative size", spec.name, fmt::join(spec.shape, "x")));
    }
    try {
      if (c10::isFloatingType(options.dtype().toScalarType())) {
        tensors.push_back(at::randn(spec.shape, generator, options));
      } else {
        const auto [low, high] = spec.range.value_or(std::make_pair<std::int64_t, std::int64_t>(0, 2));
        tensors.push_back(at::randint(low, high, spec.shape, generator, options));
      }
    } catch (const c10::Error& error) {  // out of memory, a size past int64
      throw Error(fmt::format("input {}: cannot make a {} tensor of shape {} ({})", spec.name, spec.dtype,
                              fmt::join(spec.shape, "x"), first_line(error)));
    }
  }
  return tensors;
}

Reference load_reference(const std::string& path) {
  if (std::filesystem::is_directory(path)) {
    throw Error(fmt::format("{}: the reference outputs are a folder, not a file. Run scripts/export_models.py", path));
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error(fmt::format("{}: cannot open the reference outputs. Run scripts/export_models.py", path));
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  try {
    const c10::IValue loaded = torch::jit::pickle_load(bytes);
    const auto dict = loaded.toGenericDict();
    return Reference{tensor_list(dict.at("inputs"), "inputs"), tensor_list(dict.at("outputs_pt"), "outputs_pt"),
                     tensor_list(dict.at("outputs_pt2"), "outputs_pt2")};
  } catch (const std::exception& error) {
    throw Error(fmt::format("{}: not a reference file of scripts/export_models.py ({})", path, first_line(error)));
  }
}

}  // namespace opara
