#pragma once

#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model_loading.h"
#include "opara/options.h"

namespace opara::bench {

// Places the model's nodes as compile() would with `overflow` (the times from a full `profile`;
// the estimate with `gpu_streams`, the plan's), cuts the segments, prints both to `table` and
// returns them as JSON (the "overflow" key of plan's report). Throws opara::Error for a profile
// without times or an unknown CPU node.
nlohmann::json overflow_report(const LoadedModel& model, const std::vector<at::Tensor>& inputs,
                               const OverflowOptions& overflow, const std::string& profile, int gpu_streams,
                               std::FILE* table);

}  // namespace opara::bench
