// chosen_schedule_options: what a warm start passes so that compile() makes the schedule tuning or
// measuring chose, without timing again. Each case's options are ones options_from_text takes.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "opara/options.h"

namespace opara {
namespace {

using Text = std::map<std::string, std::string>;

CompiledStats tuned_on_the_cpu(CpuShape kept) {
  CompiledStats stats;
  stats.tuning = {CpuTuningCandidate{{1, 2}}, CpuTuningCandidate{{0, 1}}, CpuTuningCandidate{{2, 1}}};
  stats.tuning.push_back(CpuTuningCandidate{kept});
  stats.tuning_chosen = stats.tuning.size() - 1;
  return stats;
}

CompiledStats measured_on_cuda(int kept_cap) {
  CompiledStats stats;
  stats.candidates = {CudaCandidate{1, 1}, CudaCandidate{4, 4}, CudaCandidate{0, 8}};
  for (std::size_t k = 0; k < stats.candidates.size(); ++k) {
    if (stats.candidates[k].max_streams == kept_cap) stats.candidate_chosen = k;
  }
  return stats;
}

TEST(ChosenSchedule, TheCpuTunersCapAndThreadsComeBackUntuned) {
  EXPECT_EQ(chosen_schedule_options(tuned_on_the_cpu({1, 2})), (Text{{"max_streams", "1"}, {"intra_op_threads", "2"}}))
      << "eager's schedule: one stream on two threads";
  EXPECT_EQ(chosen_schedule_options(tuned_on_the_cpu({2, 1})), (Text{{"max_streams", "2"}, {"intra_op_threads", "1"}}));
  // Uncapped: a thread count alone turns tuning off and plans every stream.
  const Text uncapped = chosen_schedule_options(tuned_on_the_cpu({0, 1}));
  EXPECT_EQ(uncapped, (Text{{"intra_op_threads", "1"}}));
  const Options options = options_from_text(uncapped);
  EXPECT_EQ(options.plan.max_streams, 0);
  EXPECT_EQ(options.cpu.intra_op_threads, 1);
}

TEST(ChosenSchedule, CudasKeptCapComesBackUnmeasured) {
  EXPECT_EQ(chosen_schedule_options(measured_on_cuda(1)), (Text{{"max_streams", "1"}}));
  EXPECT_EQ(chosen_schedule_options(measured_on_cuda(4)), (Text{{"max_streams", "4"}}));
  const Text plan = chosen_schedule_options(measured_on_cuda(0));
  EXPECT_EQ(plan, (Text{{"cuda_measure_ms", "0"}})) << "the plan itself, captured unmeasured";
  EXPECT_EQ(options_from_text(plan).cuda.measure_ms, 0);
}

TEST(ChosenSchedule, NothingChosenIsNothingToPass) {
  EXPECT_TRUE(chosen_schedule_options(CompiledStats{}).empty());
}

}  // namespace
}  // namespace opara
