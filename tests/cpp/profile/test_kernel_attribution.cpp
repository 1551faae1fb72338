// Joining kernel and copy records to nodes through CUPTI's external correlation records.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "opara/error.h"
#include "opara/profile.h"
#include "profile/kernel_attribution.h"
#include "profile_fixtures.h"

namespace opara {
namespace {

using ::testing::ElementsAre;
using testing::kernel;

std::vector<std::string> names(const std::vector<KernelRecord>& kernels) {
  std::vector<std::string> result;
  for (const KernelRecord& record : kernels) result.push_back(record.name);
  return result;
}

TEST(KernelAttribution, JoinsKernelsAndCopiesToTheNodeThatLaunchedThem) {
  // Node 0 made API calls 10 and 11 (two kernels from the second), node 2 call 12 (a memset);
  // node 1 launched nothing and is not expected to.
  ActivityRecords records;
  records.correlations = {{10, 0}, {11, 0}, {12, 2}};
  records.kernels = {kernel("gemm", 4, 128, 64, 0, 100, 11), kernel("epilogue", 1, 32, 16, 0, 10, 11),
                     kernel("relu", 8, 256, 16, 0, 20, 10)};
  records.copies = {CopyRecord{"memset", 64, 5, 9, 7, 12}};
  const Attribution attribution = attribute_activities(records, 3, {true, false, true});
  EXPECT_THAT(names(attribution.kernels[0]), ElementsAre("gemm", "epilogue", "relu"));
  EXPECT_TRUE(attribution.kernels[1].empty());
  EXPECT_TRUE(attribution.kernels[2].empty());
  ASSERT_EQ(attribution.copies[2].size(), 1u);
  EXPECT_EQ(attribution.copies[2][0].kind, "memset");
  EXPECT_TRUE(attribution.unattributed_kernels.empty());
  EXPECT_TRUE(attribution.unattributed_copies.empty());
  EXPECT_TRUE(attribution.silent_nodes.empty()) << "node 2 did only a memset: device work, not silence";
}

TEST(KernelAttribution, ReportsKernelsOfNoNodeAndSilentNodes) {
  // Call 20 has no correlation record (launched between nodes); call 21 names external id 9, not
  // a node of this 3-node graph. Node 1 is expected to launch a kernel and launched none.
  ActivityRecords records;
  records.correlations = {{22, 0}, {21, 9}};
  records.kernels = {kernel("stray", 1, 32, 8, 0, 5, 20), kernel("foreign", 1, 32, 8, 0, 5, 21),
                     kernel("mine", 1, 32, 8, 0, 5, 22)};
  records.copies = {CopyRecord{"memcpy HtoD", 1024, 0, 100, 7, 20}};
  const Attribution attribution = attribute_activities(records, 3, {true, true, false});
  EXPECT_THAT(names(attribution.kernels[0]), ElementsAre("mine"));
  EXPECT_THAT(names(attribution.unattributed_kernels), ElementsAre("stray", "foreign"));
  ASSERT_EQ(attribution.unattributed_copies.size(), 1u);
  EXPECT_EQ(attribution.unattributed_copies[0].kind, "memcpy HtoD");
  EXPECT_THAT(attribution.silent_nodes, ElementsAre(1));
}

TEST(KernelAttribution, ACopyJoinsThroughItsRuntimeCallWhenItsDriverCallHasNoPair) {
  // Copy records name the driver call (30, unpaired here) and the runtime call behind it (31).
  ActivityRecords records;
  records.correlations = {{31, 2}};
  records.copies = {CopyRecord{"memcpy DtoD", 256, 0, 10, 7, 30, 31}, CopyRecord{"memcpy DtoD", 256, 0, 10, 7, 32, 0}};
  const Attribution attribution = attribute_activities(records, 3, {false, false, true});
  ASSERT_EQ(attribution.copies[2].size(), 1u);
  EXPECT_EQ(attribution.copies[2][0].correlation_id, 30u);
  ASSERT_EQ(attribution.unattributed_copies.size(), 1u) << "no runtime id, no pair: of no node";
  EXPECT_EQ(attribution.unattributed_copies[0].correlation_id, 32u);
  EXPECT_TRUE(attribution.silent_nodes.empty());
}

TEST(KernelAttribution, WithoutExpectationsNoNodeIsSilent) {
  const Attribution attribution = attribute_activities({}, 4);
  EXPECT_EQ(attribution.kernels.size(), 4u);
  EXPECT_TRUE(attribution.silent_nodes.empty());
}

TEST(KernelAttribution, OneCallCorrelatedWithTwoNodesIsABug) {
  ActivityRecords records;
  records.correlations = {{5, 0}, {5, 1}};
  EXPECT_THAT([&] { attribute_activities(records, 2); }, ::testing::ThrowsMessage<InternalError>(::testing::HasSubstr(
                                                             "CUDA API call 5 is correlated with node 0 and node 1")));
  records.correlations = {{5, 1}, {5, 1}};  // the same pair twice is fine
  EXPECT_NO_THROW(attribute_activities(records, 2));
}

TEST(KernelAttribution, ExpectationsOfTheWrongSizeAreABug) {
  EXPECT_THAT([] { attribute_activities({}, 2, {true}); },
              ::testing::ThrowsMessage<InternalError>(
                  ::testing::HasSubstr("device work expectations for 1 nodes, 2 nodes profiled")));
}

}  // namespace
}  // namespace opara
