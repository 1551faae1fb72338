#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/internal_assert.h"

namespace opara {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

void check_positive(int value) {
  OPARA_ASSERT(value > 0, "value {} must be positive", value);
}

TEST(InternalAssert, PassesSilentlyWhenTheConditionHolds) {
  EXPECT_NO_THROW(check_positive(1));
}

TEST(InternalAssert, ABrokenInvariantIsAnInternalErrorNotAUserError) {
  try {
    check_positive(-3);
    FAIL() << "OPARA_ASSERT did not throw";
  } catch (const Error&) {
    FAIL() << "a bug in opara must not look like the user's error";
  } catch (const InternalError& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("a bug in opara"), HasSubstr("value -3 must be positive"),
                                    HasSubstr("value > 0"), HasSubstr("test_internal_assert.cpp")));
  }
}

TEST(InternalAssert, UnreachableNamesWhatWasReached) {
  EXPECT_THROW(OPARA_UNREACHABLE("policy {}", 7), InternalError);
}

}  // namespace
}  // namespace opara
