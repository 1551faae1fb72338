#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "runtime/cuda/cuda_model.h"

namespace opara {

// The milliseconds of `runs` runs of `model` on `inputs`, each timed on the device between CUDA
// events on the current stream, in the model's turn; `before_each` (untimed, on that stream) puts
// back what a run writes, so that every run starts from the same inputs and state.
std::vector<double> time_replays(CudaModel& model, const std::vector<at::Tensor>& inputs,
                                 const std::function<void()>& before_each, int runs);

}  // namespace opara
