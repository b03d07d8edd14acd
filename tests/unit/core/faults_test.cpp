// The one test-fault parser (include/u3d/core/faults.h): every kind, ranges, and malformed items as
// usage errors naming the item.
#include <gtest/gtest.h>

#include "u3d/core/errors.h"
#include "u3d/core/faults.h"

namespace u3d {
namespace {

TEST(TestFaults, ParsesEveryKind) {
  ASSERT_TRUE(kFaultInjection) << "the test build compiles the fault hooks (U3D_FAULT_INJECTION)";
  const TestFaults f =
      TestFaults::parse("nan_batch@5,inf_grad@7-9,nan_val@2,slow_val@300,checkpoint_delay@25,sampler_case@case_0.1-a");
  EXPECT_EQ(f.nan_batch, (std::set<int64_t>{5}));
  EXPECT_EQ(f.inf_grad, (std::set<int64_t>{7, 8, 9}));
  EXPECT_EQ(f.nan_val, (std::set<int64_t>{2}));
  EXPECT_EQ(f.slow_val_ms, 300);
  EXPECT_EQ(f.checkpoint_delay_ms, 25);
  EXPECT_EQ(f.sampler_case, "case_0.1-a");
  EXPECT_TRUE(f.any());
  EXPECT_FALSE(TestFaults::parse("").any());
}

TEST(TestFaults, MalformedItemsAreUsageErrorsNamingThem) {
  for (const std::string bad : {"nan_batch@x", "nan_batch", "inf_grad@3-", "slow_val@-5", "typo@3", "sampler_case@"}) {
    try {
      TestFaults::parse("nan_val@1," + bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UsageError& e) {
      const std::string kind = bad.substr(0, bad.find('@'));
      EXPECT_NE(std::string(e.what()).find(kind), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace u3d
