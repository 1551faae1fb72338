// to_json(GraphSetStats): what the Python package's GraphSet.stats() returns. The set's counters
// under their names, and each bucket as CompiledModel.stats() gives it (numeric_stats) with its
// device.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "opara/graph_set.h"

namespace opara {
namespace {

GraphSetStats numbered_set_stats() {
  GraphSetStats stats;
  stats.batch_sizes = {1, 4};
  stats.buckets.resize(2);
  stats.buckets[0].device = "cuda:0";
  stats.buckets[0].streams = 3;
  stats.buckets[0].memory = MemoryProtection::kKeepAlive;
  stats.buckets[1].device = "cuda:0";
  stats.buckets[1].runs = 7;
  stats.bucket_runs = {5, 7};
  stats.calls = 11;
  stats.rows = 13;
  stats.padded_rows = 2;
  stats.split_calls = 1;
  stats.shared_pool = true;
  stats.pool_bytes = 4096;
  return stats;
}

TEST(GraphSetStatsJson, TheCountersAreThereUnderTheirNames) {
  const nlohmann::json json = nlohmann::json::parse(to_json(numbered_set_stats()));
  EXPECT_EQ(json.at("batch_sizes"), (nlohmann::json{1, 4}));
  EXPECT_EQ(json.at("bucket_runs"), (nlohmann::json{5, 7}));
  EXPECT_EQ(json.at("calls"), 11);
  EXPECT_EQ(json.at("rows"), 13);
  EXPECT_EQ(json.at("padded_rows"), 2);
  EXPECT_EQ(json.at("split_calls"), 1);
  EXPECT_EQ(json.at("shared_pool"), true);
  EXPECT_EQ(json.at("pool_bytes"), 4096);
  EXPECT_EQ(json.size(), 9u) << json.dump();
}

TEST(GraphSetStatsJson, EachBucketIsItsNumericStatsWithItsDevice) {
  const GraphSetStats stats = numbered_set_stats();
  const nlohmann::json buckets = nlohmann::json::parse(to_json(stats)).at("buckets");
  ASSERT_EQ(buckets.size(), 2u);
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    nlohmann::json expected = {{"device", "cuda:0"}};
    for (const auto& [name, value] : numeric_stats(stats.buckets[k])) expected[name] = value;
    EXPECT_EQ(buckets[k], expected) << k;
  }
  EXPECT_EQ(buckets[0].at("streams"), 3);
  EXPECT_EQ(buckets[0].at("keep_alive"), 1);
  EXPECT_EQ(buckets[1].at("runs"), 7);
}

}  // namespace
}  // namespace opara
