// opara's CUPTI session and the PyTorch profiler share CUPTI's activity buffers, which one client
// may have: while torch.profiler traces (Kineto, from preparing a trace to stopping it), opara
// refuses to profile and says why, on any machine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <set>

#include "opara/model_profiler.h"
#include "profiler/cupti_profiler.h"
#include "profiler/torch_profiler_state.h"

namespace opara {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string cupti_refusal() {
  try {
    CuptiProfiler cupti;
  } catch (const CuptiUnavailable& error) {
    return error.what();
  }
  return "no refusal";
}

TEST(TorchProfilerState, OparaDoesNotProfileWhileTorchProfilerTraces) {
  namespace profiler = torch::profiler::impl;
  ASSERT_FALSE(active_torch_profiler().has_value()) << "the PyTorch profiler is on before the test";
  const profiler::ProfilerConfig config(profiler::ProfilerState::KINETO);
  const std::set<profiler::ActivityType> activities{profiler::ActivityType::CPU};
  // What torch.profiler.profile's start does: prepare (Kineto takes CUPTI here), then enable.
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  const std::optional<std::string> active = active_torch_profiler();
  const std::string refusal = cupti_refusal();
  torch::autograd::profiler::disableProfiler();
  ASSERT_TRUE(active.has_value());
  EXPECT_THAT(*active, HasSubstr("torch.profiler"));
  EXPECT_THAT(refusal, AllOf(HasSubstr("torch.profiler"), HasSubstr("outside")));
  EXPECT_FALSE(active_torch_profiler().has_value());
  // Once it stopped, whatever refuses CUPTI now (no GPU here, say) is not the PyTorch profiler.
  EXPECT_THAT(cupti_refusal(), Not(HasSubstr("torch.profiler")));
}

// cuptiSubscribe_v2 names the client holding CUPTI "CUPTI for <its name>", or "CUPTI for <not
// provided>": the refusal names it plainly, and a nameless one after a PyTorch profiler trace is
// Kineto, which keeps CUPTI until the process ends (stopping it is no advice then).
TEST(CuptiTakenMessage, NamesTheHolderPlainly) {
  const std::string named = cupti_taken_message("CUPTI for opara profiler", false);
  EXPECT_THAT(named, AllOf(HasSubstr("taken by opara profiler:"), Not(HasSubstr("CUPTI for")), HasSubstr("stop it")));
  for (const char* nameless : {"CUPTI for <not provided>", "<not provided>", ""}) {
    const std::string other = cupti_taken_message(nameless, false);
    EXPECT_THAT(other, AllOf(HasSubstr("a client that gave no name"), Not(HasSubstr("<not provided>")),
                             Not(HasSubstr("CUPTI for")), Not(HasSubstr("PyTorch profiler (Kineto)"))))
        << nameless;
    const std::string kineto = cupti_taken_message(nameless, true);
    EXPECT_THAT(kineto,
                AllOf(HasSubstr("a client that gave no name"), HasSubstr("PyTorch profiler (Kineto)"),
                      HasSubstr("until the process ends"), Not(HasSubstr("<not provided>")), Not(HasSubstr("stop it"))))
        << nameless;
  }
}

}  // namespace
}  // namespace opara
