#include "model_files.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>

#include <cstdlib>
#include <filesystem>

#include "tools/model_inputs.h"

namespace opara::testing {

std::string model_path(const std::string& name, const std::string& extension) {
  const char* folder = std::getenv("OPARA_MODELS");
  return (std::filesystem::path(folder ? folder : OPARA_TEST_MODELS_DIR) / (name + "_b1." + extension)).string();
}

bool model_exported(const std::string& name) {
  for (const char* extension : {"pt", "pt2", "json", "ref.pt"}) {
    if (!std::filesystem::exists(model_path(name, extension))) return false;
  }
  return true;
}

const std::vector<std::string>& all_models() {
  static const std::vector<std::string> models = {"googlenet", "inception_v3", "resnet50", "bert_base", "t5_small",
                                                  "vit",       "branchy",      "chain",    "inplace",   "recurrent"};
  return models;
}

const std::vector<std::string>& half_precision_models() {
  static const std::vector<std::string> models = {"branchy_bfloat16", "branchy_float16", "recurrent_float16"};
  return models;
}

FormatReference format_reference(const std::string& name, const std::string& extension) {
  Reference reference = load_reference(model_path(name, "ref.pt"));
  FormatReference result;
  result.inputs.assign(reference.inputs.begin(), reference.inputs.end());
  result.tensors = std::move(reference.inputs);
  result.expected = extension == "pt" ? std::move(reference.outputs_pt) : std::move(reference.outputs_pt2);
  return result;
}

std::string fixture_path(const std::string& file_name) {
  return (std::filesystem::path(OPARA_TEST_DATA_DIR) / file_name).string();
}

std::string scratch_path(const std::string& file_name) {
  // A folder per test: ctest runs tests in parallel processes, and two of them writing one
  // profile.json read each other's half-written file.
  auto folder = std::filesystem::temp_directory_path() / "opara_tests";
  if (const auto* test = ::testing::UnitTest::GetInstance()->current_test_info()) {
    folder /= std::string(test->test_suite_name()) + "." + test->name();
  }
  std::filesystem::create_directories(folder);
  return (folder / file_name).string();
}

std::string saved_module(const std::string& name, const char* source) {
  const std::string path = scratch_path(name + ".pt");
  torch::jit::Module module(name);
  module.define(source);
  module.save(path);
  return path;
}

}  // namespace opara::testing
