// The options that compile again what tuning (CPU) or measuring (CUDA) chose (options.h).
#include <string>

#include "opara/options.h"

namespace opara {

std::map<std::string, std::string> chosen_schedule_options(const CompiledStats& stats) {
  if (!stats.tuning.empty()) {
    const CpuShape& kept = stats.tuning.at(stats.tuning_chosen).shape;
    std::map<std::string, std::string> options = {{"intra_op_threads", std::to_string(kept.intra_op_threads)}};
    // A thread count alone turns tuning off and plans every stream, the uncapped candidate.
    if (kept.max_streams > 0) options["max_streams"] = std::to_string(kept.max_streams);
    return options;
  }
  if (!stats.candidates.empty()) {
    const CudaCandidate& kept = stats.candidates.at(stats.candidate_chosen);
    if (kept.max_streams > 0) return {{"max_streams", std::to_string(kept.max_streams)}};
    return {{"cuda_measure_ms", "0"}};  // the plan itself, captured unmeasured
  }
  return {};
}

}  // namespace opara
