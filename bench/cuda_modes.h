#pragma once

#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "model_loading.h"
#include "opara/compiled_model.h"

namespace opara::bench {

struct CudaRunRequest {
  std::vector<std::string> modes;  // eager, sequential, nimble, opara, opara-noreorder, opara+overflow
  std::vector<at::Tensor> inputs;  // on the CPU; moved to the GPU here
  int iters = 1000;
  int warmup = 10;
  // What every graph mode compiles with: each mode sets its streams and order (the cap in
  // options.plan.max_streams stays), and only opara+overflow keeps options.overflow.
  Options options;
};

// Times each mode on the GPU with CUDA events around each run (median, p10, p90), one mode after
// the other: build, warm up, time, then its peak memory; prints a table on `table` and returns
// the modes' JSON entries. Errors are against eager on the GPU, which always runs first.
nlohmann::json run_cuda_modes(const LoadedModel& model, const CudaRunRequest& request, std::FILE* table);

}  // namespace opara::bench
