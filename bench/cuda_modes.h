#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "mode_result.h"
#include "model_loading.h"
#include "opara/options.h"

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

// Times each mode on the GPU with CUDA events around each run, one mode after the other (one
// round): build, warm up, time, then its peak memory. Outputs are checked against eager on the
// GPU, which always runs first (unreported unless asked for). Prints nothing: its notes say what
// the cuBLAS workspaces took and what CPU overflow did.
MeasuredModes run_cuda_modes(const LoadedModel& model, const CudaRunRequest& request);

}  // namespace opara::bench
