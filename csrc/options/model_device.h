#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <string>
#include <vector>

#include "opara/options.h"

namespace opara {

// Where a model compiles and plans: Options::device, else where the CUDA examples are (a Dynamo
// graph of a CUDA model may begin with a CPU scalar), else where the others are, else the CPU. A
// CUDA device always carries its index (the current device when none was named): capture pools
// and the allocators take an index, never -1. The one rule for compile(), graph sets and the plan
// op. Throws opara::Error naming `source` for a device opara does not run on, and for CUDA where
// no GPU is visible.
[[nodiscard]] c10::Device model_device(const Options& options, const std::vector<at::Tensor>& examples,
                                       const std::string& source);

}  // namespace opara
