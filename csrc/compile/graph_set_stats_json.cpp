#include <nlohmann/json.hpp>

#include "opara/graph_set.h"
#include "opara/options.h"

namespace opara {

std::string to_json(const GraphSetStats& stats) {
  nlohmann::json buckets = nlohmann::json::array();
  for (const CompiledStats& bucket : stats.buckets) {
    nlohmann::json entry = {{"device", bucket.device}};
    for (const auto& [name, value] : numeric_stats(bucket)) entry[name] = value;
    buckets.push_back(std::move(entry));
  }
  const nlohmann::json json = {{"batch_sizes", stats.batch_sizes},
                               {"bucket_runs", stats.bucket_runs},
                               {"calls", stats.calls},
                               {"rows", stats.rows},
                               {"padded_rows", stats.padded_rows},
                               {"split_calls", stats.split_calls},
                               {"shared_pool", stats.shared_pool},
                               {"pool_bytes", stats.pool_bytes},
                               {"buckets", std::move(buckets)}};
  return json.dump();
}

}  // namespace opara
