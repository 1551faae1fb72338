#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/cuda.h>

#include <string>
#include <vector>

namespace opara::testing {

// The exported test models ($OPARA_MODELS, default the repo's torchscript_models/): "<folder>/<name>_b1.<ext>".
std::string model_path(const std::string& name, const std::string& extension);

// True when the model's files (both formats, sidecar, reference) are all there.
bool model_exported(const std::string& name);

// Every model scripts/export_models.py writes.
const std::vector<std::string>& all_models();

// The half-precision exports scripts/test.sh makes (export_models.py --dtype): "<model>_<dtype>".
const std::vector<std::string>& half_precision_models();

// The exporter's reference for one format of a model: its inputs, and the outputs of that
// format's own forward on them (the exported program's module for .pt2).
struct FormatReference {
  std::vector<at::Tensor> tensors;  // the inputs
  std::vector<c10::IValue> inputs;  // the same, as executors take them
  std::vector<at::Tensor> expected;
};
FormatReference format_reference(const std::string& name, const std::string& extension);

// A small committed fixture in tests/data (made by tests/data/make_fixtures.py).
std::string fixture_path(const std::string& file_name);

// A scratch file a test writes, in a folder of the running test's own.
std::string scratch_path(const std::string& file_name);

// A TorchScript module of one forward() written in `source`, saved as <scratch>/<name>.pt.
std::string saved_module(const std::string& name, const char* source);

}  // namespace opara::testing

// Skips the test when no CUDA GPU is visible: the GPU tests run for real only where one is.
#define OPARA_REQUIRE_GPU()                                                                        \
  do {                                                                                             \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU here: the GPU path is not run"; \
  } while (false)

// Skips the test, saying how to make the model, when it has not been exported.
#define OPARA_REQUIRE_MODEL(name)                                                              \
  do {                                                                                         \
    if (!::opara::testing::model_exported(name)) {                                             \
      GTEST_SKIP() << "model " << (name) << " is not exported: run scripts/export_models.py (" \
                   << ::opara::testing::model_path(name, "pt") << ")";                         \
    }                                                                                          \
  } while (false)
