#pragma once

#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model_loading.h"

namespace opara::bench {

// What `plan --overflow` was asked for.
struct OverflowSettings {
  std::string policy = "none";  // none | comm_sd | manual
  double alpha_us = 100;
  std::vector<std::string> cpu_nodes;  // manual: ids and kinds, or one .json file {"cpu": [...]}
  std::string profile;                 // a full profile: the times Comm+SD and the estimate need
  int gpu_streams = 1;                 // the plan's streams, for the estimate
};

// Places the model's nodes, cuts the segments, prints both to `table` and returns them as JSON
// (the "overflow" key of plan's report). Throws opara::Error for a profile without times or an
// unknown CPU node.
nlohmann::json overflow_report(const LoadedModel& model, const std::vector<at::Tensor>& inputs,
                               const OverflowSettings& settings, std::FILE* table);

}  // namespace opara::bench
