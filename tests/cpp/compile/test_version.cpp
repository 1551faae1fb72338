// version(): which opara this is, the LibTorch it was compiled against and the one running. The
// tests link the LibTorch they were compiled against, so the two agree here; the running one is
// read from the loaded library, not from the headers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/Version.h>
#include <torch/version.h>

#include "opara/version.h"

namespace opara {
namespace {

using ::testing::HasSubstr;

TEST(Version, NamesTheTorchItWasBuiltAgainstAndTheOneRunning) {
  const VersionInfo info = version();
  EXPECT_EQ(info.opara, OPARA_TEST_PROJECT_VERSION);
  EXPECT_EQ(info.torch_built, TORCH_VERSION);
  EXPECT_EQ(info.torch_running, TORCH_VERSION) << "the loaded LibTorch is another release than the headers'";
  EXPECT_THAT(at::show_config(), HasSubstr("TORCH_VERSION=" + info.torch_running));
}

TEST(Version, ReadsAsOneLine) {
  const VersionInfo info{"0.1.0", "2.11.0", "2.15.0"};
  EXPECT_EQ(to_string(info), "opara 0.1.0, built against torch 2.11.0, running torch 2.15.0");
}

}  // namespace
}  // namespace opara
