// Options from text: what the extension's Dict(str, str) and the Python keywords turn into.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "opara/error.h"
#include "opara/options.h"

namespace opara {
namespace {

using ::testing::HasSubstr;

std::string error_of(const std::map<std::string, std::string>& text) {
  try {
    options_from_text(text);
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(OptionsText, NoKeysGiveTheDefaults) {
  const Options options = options_from_text({});
  const Options defaults;
  EXPECT_FALSE(options.device.has_value());
  EXPECT_EQ(options.plan.streams, defaults.plan.streams);
  EXPECT_EQ(options.plan.order, defaults.plan.order);
  EXPECT_EQ(options.plan.max_streams, defaults.plan.max_streams);
  EXPECT_EQ(options.cuda.memory, defaults.cuda.memory);
  EXPECT_EQ(options.cuda.warmup_runs, defaults.cuda.warmup_runs);
  EXPECT_DOUBLE_EQ(options.cpu.tuning_ms, defaults.cpu.tuning_ms);
}

TEST(OptionsText, EveryKeySetsItsMember) {
  const Options options = options_from_text({
      {"device", "cuda:1"},         {"streams", "nimble"},      {"order", "topological"},
      {"max_streams", "4"},         {"profile", "p.json"},      {"allow_profile_mismatch", "true"},
      {"ridge_point", "8.5"},       {"outputs", "view"},        {"memory", "keep-alive"},
      {"on_uncapturable", "error"}, {"warmup_runs", "3"},       {"intra_op_threads", "3"},
      {"pin_workers", "false"},     {"split_min_us", "0"},      {"cpu_tuning_ms", "0"},
      {"overflow", "manual"},       {"alpha_us", "0"},          {"cpu_nodes", "12,aten::relu,"},
      {"static_inputs", "0,2"},     {"state_in_place", "true"}, {"regions", "true"},
      {"region_min_share", "0.25"}, {"memory_pool", "3,1"},     {"cuda_measure_ms", "0"},
      {"memory_budget", "1.5x"},
  });
  ASSERT_TRUE(options.device.has_value());
  EXPECT_EQ(*options.device, c10::Device(c10::kCUDA, 1));
  EXPECT_EQ(options.plan.streams, StreamPolicy::kNimble);
  EXPECT_EQ(options.plan.order, OrderPolicy::kTopological);
  EXPECT_EQ(options.plan.max_streams, 4);
  EXPECT_EQ(options.costs.profile, "p.json");
  EXPECT_TRUE(options.costs.allow_profile_mismatch);
  EXPECT_DOUBLE_EQ(options.costs.ridge_point, 8.5);
  EXPECT_EQ(options.outputs, Options::Outputs::kView);
  EXPECT_EQ(options.cuda.memory, MemoryProtection::kKeepAlive);
  EXPECT_EQ(options_from_text({{"memory", "smaller-pool"}}).cuda.memory, MemoryProtection::kSmallerPool);
  EXPECT_EQ(options.cuda.on_uncapturable, CudaOptions::OnUncapturable::kError);
  EXPECT_EQ(options.cuda.warmup_runs, 3);
  EXPECT_EQ(options.cpu.intra_op_threads, 3);
  EXPECT_FALSE(options.cpu.pin_workers);
  EXPECT_DOUBLE_EQ(options.cpu.split_min_us, 0);
  EXPECT_DOUBLE_EQ(options.cpu.tuning_ms, 0);
  EXPECT_EQ(options.overflow.policy, OverflowPolicy::kManual);
  EXPECT_DOUBLE_EQ(options.overflow.alpha_us, 0);
  EXPECT_EQ(options.overflow.cpu_nodes, (std::vector<std::string>{"12", "aten::relu"}));
  EXPECT_EQ(options.static_inputs, (std::vector<int>{0, 2}));
  EXPECT_TRUE(options.state_in_place);
  EXPECT_TRUE(options.plan.regions);
  EXPECT_DOUBLE_EQ(options.plan.region_min_share, 0.25);
  EXPECT_EQ(options.cuda.memory_pool, (std::pair<unsigned long long, unsigned long long>{3, 1}));
  EXPECT_DOUBLE_EQ(options.cuda.measure_ms, 0);
  EXPECT_DOUBLE_EQ(options.cuda.memory_budget.ratio, 1.5);
  EXPECT_EQ(options.cuda.memory_budget.bytes, 0u);
  EXPECT_EQ(option_keys().size(), 25u) << "a key was added: test it here";
}

TEST(OptionsText, AMemoryBudgetIsARatioOrASize) {
  EXPECT_DOUBLE_EQ(options_from_text({}).cuda.memory_budget.ratio, 1.3) << "the documented default";
  EXPECT_EQ(options_from_text({}).cuda.memory_budget.bytes, 0u);
  EXPECT_EQ(options_from_text({{"memory_budget", "512MiB"}}).cuda.memory_budget.bytes, 512u << 20);
  EXPECT_EQ(options_from_text({{"memory_budget", "2GB"}}).cuda.memory_budget.bytes, 2000000000u);
  EXPECT_EQ(options_from_text({{"memory_budget", "1.5GiB"}}).cuda.memory_budget.bytes, 3u << 29);
  EXPECT_EQ(options_from_text({{"memory_budget", "1048576"}}).cuda.memory_budget.bytes, 1048576u);
  EXPECT_EQ(options_from_text({}).cuda.memory_budget.headroom_bytes, 64u << 20) << "the documented default";
  const MemoryBudget bare = options_from_text({{"memory_budget", "1.3x+0"}}).cuda.memory_budget;
  EXPECT_DOUBLE_EQ(bare.ratio, 1.3);
  EXPECT_EQ(bare.headroom_bytes, 0u);
  EXPECT_EQ(options_from_text({{"memory_budget", "2x + 16MiB"}}).cuda.memory_budget.headroom_bytes, 16u << 20);
  EXPECT_EQ(options_from_text({{"memory_budget", "2x"}}).cuda.memory_budget.headroom_bytes, 64u << 20);
  EXPECT_DOUBLE_EQ(options_from_text({{"memory_budget", "2x"}}).cuda.memory_budget.ratio, 2.0);
  for (const char* budget :
       {"", "x", "0x", "0", "-1x", "1.3X", "12 parsecs", "1e9", "nan", "1.3x+", "1.3x+-1", "1.3x+2x", "+64MiB"}) {
    const std::string error = error_of({{"memory_budget", budget}});
    EXPECT_THAT(error, HasSubstr("a ratio to the sequential graph's pool ('1.3x')")) << budget;
    EXPECT_THAT(error, HasSubstr("or a size ('512MiB', '2GB', bytes)")) << budget;
  }
  EXPECT_THAT(error_of({{"memory_budget", "0.5B"}}), HasSubstr("a size of at least one byte"))
      << "0 bytes would mean no size given";
  EXPECT_THAT(error_of({{"cuda_measure_ms", "-1"}}), HasSubstr("option cuda_measure_ms='-1'"));
}

TEST(OptionsText, AnUnknownKeyListsTheKnownOnes) {
  const std::string message = error_of({{"stream", "opara"}});
  EXPECT_THAT(message, HasSubstr("unknown option 'stream'"));
  for (const std::string& key : option_keys()) EXPECT_THAT(message, HasSubstr(key));
}

TEST(OptionsText, BadValuesNameTheKeyAndWhatItTakes) {
  EXPECT_THAT(error_of({{"streams", "many"}}), HasSubstr("option streams: unknown stream allocator 'many'"));
  EXPECT_THAT(error_of({{"order", "random"}}), HasSubstr("option order"));
  EXPECT_THAT(error_of({{"max_streams", "-1"}}), HasSubstr("option max_streams='-1'"));
  EXPECT_THAT(error_of({{"max_streams", "4x"}}), HasSubstr("a whole number"));
  EXPECT_THAT(error_of({{"warmup_runs", "1"}}), HasSubstr("a whole number of at least 2"));
  EXPECT_THAT(error_of({{"max_streams", ""}}), HasSubstr("a whole number"));
  EXPECT_THAT(error_of({{"ridge_point", "0"}}), HasSubstr("a number above 0"));
  EXPECT_THAT(error_of({{"ridge_point", "nan"}}), HasSubstr("a number above 0"));
  EXPECT_THAT(error_of({{"memory", "record_stream"}}), HasSubstr("one of record-stream, keep-alive, smaller-pool"));
  EXPECT_THAT(error_of({{"outputs", "copy"}}), HasSubstr("one of clone, view"));
  EXPECT_THAT(error_of({{"on_uncapturable", "skip"}}), HasSubstr("one of split, error"));
  EXPECT_THAT(error_of({{"device", "gpu"}}), HasSubstr("option device='gpu'"));
  EXPECT_THAT(error_of({{"allow_profile_mismatch", "yes"}}), HasSubstr("one of true, false"));
  EXPECT_THAT(error_of({{"pin_workers", "1"}}), HasSubstr("option pin_workers='1': expected one of true, false"));
  EXPECT_THAT(error_of({{"overflow", "sd"}}), HasSubstr("option overflow: unknown overflow policy 'sd'"));
  EXPECT_THAT(error_of({{"alpha_us", "-5"}}), HasSubstr("option alpha_us='-5': expected a number of at least 0"));
  EXPECT_THAT(error_of({{"static_inputs", "0,x"}}), HasSubstr("option static_inputs='x'"));
  EXPECT_THAT(error_of({{"static_inputs", "-1"}}), HasSubstr("a whole number of at least 0"));
  EXPECT_THAT(error_of({{"split_min_us", "fast"}}), HasSubstr("option split_min_us='fast'"));
  for (const char* pool : {"3", "3,", "a,1", "3,1,2", "-1,0"}) {
    EXPECT_THAT(error_of({{"memory_pool", pool}}),
                HasSubstr("two whole numbers 'a,b' (torch.cuda.graph_pool_handle())"))
        << pool;
  }
}

}  // namespace
}  // namespace opara
