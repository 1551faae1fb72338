#include <nlohmann/json.hpp>

#include "opara/options.h"

namespace opara {

std::string to_json(const CompiledStats& stats) {
  nlohmann::json tuning = nlohmann::json::array();
  for (std::size_t k = 0; k < stats.tuning.size(); ++k) {
    const CpuTuningCandidate& candidate = stats.tuning[k];
    tuning.push_back({{"max_streams", candidate.shape.max_streams},
                      {"intra_op_threads", candidate.shape.intra_op_threads},
                      {"streams", candidate.streams},
                      {"median_ms", candidate.median_ms},
                      {"speedup", candidate.speedup},
                      {"searched_priorities", candidate.searched_priorities},
                      {"replay_speedup", candidate.replay_speedup},
                      {"chosen", k == stats.tuning_chosen}});
  }
  const nlohmann::json json = {
      {"device", stats.device},
      {"streams", stats.streams},
      {"events", stats.events},
      {"captured_nodes", stats.captured_nodes},
      {"graph_nodes", stats.graph_nodes},
      {"segments", stats.segments},
      {"host_nodes", stats.host_nodes},
      {"cpu_nodes", stats.cpu_nodes},
      {"bytes_to_host", stats.bytes_to_host},
      {"bytes_to_device", stats.bytes_to_device},
      {"host_ms", stats.host_ms},
      {"predicted_none_us", stats.predicted_none_us},
      {"predicted_us", stats.predicted_us},
      {"compile_ms", stats.compile_ms},
      {"plan_us", stats.plan_us},
      {"intra_op_threads", stats.intra_op_threads},
      {"tuning_ms", stats.tuning_ms},
      {"capture_ms", stats.capture_ms},
      {"pool_bytes", stats.pool_bytes},
      {"memory", std::string(to_string(stats.memory))},
      {"pool_bytes_record_stream", stats.pool_bytes_record_stream},
      {"pool_bytes_keep_alive", stats.pool_bytes_keep_alive},
      {"peak_bytes", stats.peak_bytes},
      {"runs", stats.runs},
      {"eager_fallbacks", stats.eager_fallbacks},
      {"tuning", std::move(tuning)},
  };
  return json.dump();
}

}  // namespace opara
