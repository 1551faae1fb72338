// to_json(CompiledStats): what opara-bench reports and the Python package's stats() reads. Every
// member appears under its own name with its value, the memory protection as the option text
// spells it, and the CPU's tuning and CUDA's measured candidates with the kept one marked;
// numeric_stats() gives its numbers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <string>

#include "opara/options.h"

namespace opara {
namespace {

using ::testing::UnorderedElementsAreArray;

// Distinct values, so that a member written under another's name shows.
CompiledStats numbered_stats() {
  CompiledStats stats;
  stats.device = "cuda:1";
  stats.streams = 1;
  stats.events = 2;
  stats.captured_nodes = 3;
  stats.graph_nodes = 4;
  stats.segments = 5;
  stats.host_nodes = 6;
  stats.cpu_nodes = 7;
  stats.bytes_to_host = 8;
  stats.bytes_to_device = 9;
  stats.host_ms = 10.5;
  stats.predicted_none_us = 11.5;
  stats.predicted_us = 12.5;
  stats.compile_ms = 13.5;
  stats.plan_us = 14.5;
  stats.intra_op_threads = 15;
  stats.tuning_ms = 16.5;
  stats.capture_ms = 17.5;
  stats.pool_bytes = 18;
  stats.memory = MemoryProtection::kKeepAlive;
  stats.pool_bytes_record_stream = 19;
  stats.pool_bytes_keep_alive = 20;
  stats.peak_bytes = 21;
  stats.runs = 22;
  stats.eager_fallbacks = 23;
  stats.tuning = {CpuTuningCandidate{{1, 2}, 1, 3.5, 1.0, false, 1.0},
                  CpuTuningCandidate{{0, 1}, 4, 2.5, 1.4, true, 1.1}};
  stats.tuning_chosen = 1;
  stats.tuning_timings = 2;
  stats.candidates = {CudaCandidate{1, 1, 2.0, 1.0, 1000, false, 900},
                      CudaCandidate{2, 2, 1.6, 1.25, 1200, false, 1100, 64, 96},
                      CudaCandidate{0, 6, 1.2, 1.6, 4000, true, 3900}};
  stats.candidate_chosen = 1;
  stats.measure_ms = 24.5;
  stats.memory_budget_bytes = 25;
  stats.pool_estimate_bytes = 26;
  stats.sequential_pool_estimate_bytes = 27;
  stats.budget_stream_cap = 28;
  stats.workspace_bytes = 29;
  stats.workspace_estimate_bytes = 30;
  return stats;
}

TEST(StatsJson, EveryMemberIsThereUnderItsName) {
  const nlohmann::json json = nlohmann::json::parse(to_json(numbered_stats()));
  const nlohmann::json expected = {
      {"device", "cuda:1"},
      {"streams", 1},
      {"events", 2},
      {"captured_nodes", 3},
      {"graph_nodes", 4},
      {"segments", 5},
      {"host_nodes", 6},
      {"cpu_nodes", 7},
      {"bytes_to_host", 8},
      {"bytes_to_device", 9},
      {"host_ms", 10.5},
      {"predicted_none_us", 11.5},
      {"predicted_us", 12.5},
      {"compile_ms", 13.5},
      {"plan_us", 14.5},
      {"intra_op_threads", 15},
      {"tuning_ms", 16.5},
      {"capture_ms", 17.5},
      {"pool_bytes", 18},
      {"memory", "keep-alive"},
      {"pool_bytes_record_stream", 19},
      {"pool_bytes_keep_alive", 20},
      {"peak_bytes", 21},
      {"runs", 22},
      {"eager_fallbacks", 23},
      {"tuning_timings", 2},
      {"measure_ms", 24.5},
      {"memory_budget_bytes", 25},
      {"pool_estimate_bytes", 26},
      {"sequential_pool_estimate_bytes", 27},
      {"budget_stream_cap", 28},
      {"workspace_bytes", 29},
      {"workspace_estimate_bytes", 30},
  };
  for (const auto& [key, value] : expected.items()) EXPECT_EQ(json.at(key), value) << key;
  std::vector<std::string> keys;
  for (const auto& [key, value] : json.items()) keys.push_back(key);
  std::vector<std::string> expected_keys{"tuning", "candidates"};
  for (const auto& [key, value] : expected.items()) expected_keys.push_back(key);
  EXPECT_THAT(keys, UnorderedElementsAreArray(expected_keys));
}

TEST(StatsJson, TheTuningCandidatesNameTheKeptOne) {
  const nlohmann::json tuning = nlohmann::json::parse(to_json(numbered_stats())).at("tuning");
  ASSERT_EQ(tuning.size(), 2u);
  EXPECT_EQ(tuning[0], (nlohmann::json{{"max_streams", 1},
                                       {"intra_op_threads", 2},
                                       {"streams", 1},
                                       {"median_ms", 3.5},
                                       {"speedup", 1.0},
                                       {"searched_priorities", false},
                                       {"replay_speedup", 1.0},
                                       {"chosen", false}}));
  EXPECT_EQ(tuning[1].at("chosen"), true);
  EXPECT_EQ(tuning[1].at("searched_priorities"), true);
  EXPECT_EQ(tuning[1].at("streams"), 4);
  EXPECT_TRUE(nlohmann::json::parse(to_json(CompiledStats{})).at("tuning").empty()) << "untuned: no candidates";
}

TEST(StatsJson, TheCudaCandidatesNameTheKeptOneAndThoseOverBudget) {
  const nlohmann::json candidates = nlohmann::json::parse(to_json(numbered_stats())).at("candidates");
  ASSERT_EQ(candidates.size(), 3u);
  EXPECT_EQ(candidates[1], (nlohmann::json{{"max_streams", 2},
                                           {"streams", 2},
                                           {"median_ms", 1.6},
                                           {"speedup", 1.25},
                                           {"pool_bytes", 1200},
                                           {"over_budget", false},
                                           {"pool_estimate_bytes", 1100},
                                           {"workspace_bytes", 64},
                                           {"workspace_estimate_bytes", 96},
                                           {"chosen", true}}));
  EXPECT_EQ(candidates[0].at("chosen"), false);
  EXPECT_EQ(candidates[2].at("over_budget"), true);
  EXPECT_TRUE(nlohmann::json::parse(to_json(CompiledStats{})).at("candidates").empty()) << "unmeasured: none";
}

TEST(StatsJson, NumericStatsAreTheJsonsNumbersAndKeepAlive) {
  const CompiledStats stats = numbered_stats();
  const nlohmann::json json = nlohmann::json::parse(to_json(stats));
  std::map<std::string, double> numbers;
  for (const auto& [name, value] : numeric_stats(stats)) EXPECT_TRUE(numbers.emplace(name, value).second) << name;
  EXPECT_EQ(numbers.at("keep_alive"), 1) << "captured with keep-alive";
  numbers.erase("keep_alive");
  std::map<std::string, double> expected;
  for (const auto& [key, value] : json.items()) {
    if (value.is_number()) expected.emplace(key, value.get<double>());
  }
  EXPECT_EQ(numbers, expected) << "neither the text (device, memory) nor the tuning list";
  CompiledStats recorded;
  recorded.memory = MemoryProtection::kRecordStream;
  const auto recorded_numbers = numeric_stats(recorded);
  const auto keep_alive = std::find_if(recorded_numbers.begin(), recorded_numbers.end(),
                                       [](const auto& number) { return number.first == "keep_alive"; });
  ASSERT_NE(keep_alive, recorded_numbers.end());
  EXPECT_EQ(keep_alive->second, 0);
}

TEST(StatsJson, MemoryIsSpeltAsTheOptionTakesIt) {
  for (const MemoryProtection memory :
       {MemoryProtection::kRecordStream, MemoryProtection::kKeepAlive, MemoryProtection::kSmallerPool}) {
    const std::string text(to_string(memory));
    EXPECT_EQ(options_from_text({{"memory", text}}).cuda.memory, memory) << text;
  }
}

}  // namespace
}  // namespace opara
