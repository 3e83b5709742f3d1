#include "core/schedule/runtime_estimate.h"

#include <gtest/gtest.h>

namespace gpuslice::core {
namespace {

using std::chrono::milliseconds;
constexpr int64_t kHour = 3600 * 1000;

Status Set(RuntimeEstimates* e, std::string_view key, std::string_view value) {
  bool known = false;
  Status s = e->Apply(key, value, &known);
  EXPECT_TRUE(known) << key;
  return s;
}

TEST(RuntimeEstimates, AnHourByDefault) {
  RuntimeEstimates e;
  EXPECT_EQ(e.For("", Priority::kNormal), milliseconds(kHour));
}

TEST(RuntimeEstimates, ThePoolsEstimateWinsOverThePrioritysOverTheMachines) {
  RuntimeEstimates e;
  ASSERT_TRUE(Set(&e, "default_runtime", "2h").ok());
  ASSERT_TRUE(Set(&e, "default_runtime.priority.high", "30m").ok());
  ASSERT_TRUE(Set(&e, "default_runtime.pool.inference", "10m").ok());
  EXPECT_EQ(e.For("", Priority::kNormal), milliseconds(2 * kHour));
  EXPECT_EQ(e.For("", Priority::kHigh), milliseconds(kHour / 2));
  EXPECT_EQ(e.For("inference", Priority::kHigh), milliseconds(kHour / 6));
  EXPECT_EQ(e.Describe(), "2h (pool inference: 10m; priority high: 30m)");
}

TEST(RuntimeEstimates, OffAtALevelFallsThroughAndOffForTheMachineMeansNone) {
  RuntimeEstimates e;
  ASSERT_TRUE(Set(&e, "default_runtime.pool.batch", "off").ok());
  EXPECT_EQ(e.For("batch", Priority::kLow), milliseconds(kHour));
  ASSERT_TRUE(Set(&e, "default_runtime", "off").ok());
  EXPECT_FALSE(e.For("batch", Priority::kLow).has_value());
}

TEST(RuntimeEstimates, BadSettingsNameTheKeyAndOtherKeysAreNotTheirs) {
  RuntimeEstimates e;
  Status s = Set(&e, "default_runtime", "soon");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("default_runtime"), std::string::npos) << s.message();
  EXPECT_FALSE(Set(&e, "default_runtime.priority.urgent", "1h").ok());
  EXPECT_FALSE(Set(&e, "default_runtime", "0s").ok());
  bool known = true;
  EXPECT_TRUE(e.Apply("preemption", "never", &known).ok());
  EXPECT_FALSE(known);
}

TEST(ExpectedEndMs, WhatIsLeftOfTheEstimateWhileWithinIt) {
  EXPECT_EQ(ExpectedEndMs(1000, 0, kHour), 1000 + kHour);
  EXPECT_EQ(ExpectedEndMs(1000, kHour / 4, kHour), 1000 + 3 * kHour / 4);
}

TEST(ExpectedEndMs, AJobPastItsEstimateIsExpectedToRunAsLongAgain) {
  // Ran 1.5 h of a 1 h estimate: expected to end at 2 h.
  EXPECT_EQ(ExpectedEndMs(0, 3 * kHour / 2, kHour), kHour / 2);
  // Ran 5 h: expected at 8 h.
  EXPECT_EQ(ExpectedEndMs(0, 5 * kHour, kHour), 3 * kHour);
  // Exactly at the estimate: never now, always ahead.
  EXPECT_GT(ExpectedEndMs(0, kHour, kHour), 0);
}

}  // namespace
}  // namespace gpuslice::core
