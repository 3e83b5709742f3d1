#include "core/jobs/elastic.h"

#include <gtest/gtest.h>

namespace gpuslice::core {
namespace {

ElasticJob E(uint64_t id, uint32_t min, uint32_t max, uint32_t held, Priority p = Priority::kNormal,
             int64_t last_change_ms = 0) {
  return {id, min, max, held, p, last_change_ms};
}

TEST(ElasticGrowth, FewestFirstWhileIdleGpusLast) {
  auto steps = PlanElasticGrowth({E(1, 1, 4, 3), E(2, 1, 4, 1), E(3, 2, 2, 2)}, 1, false, 60'000);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].id, 2u);
  EXPECT_EQ(steps[0].delta, 1);
  EXPECT_EQ(steps[0].reason, "a GPU is idle and nothing waits: 1 -> 2 of at most 4");
}

// A job grows by all idle GPUs it may take, not one per cool-down.
TEST(ElasticGrowth, TakesAllTheIdleGpusAtOnceSharedFewestFirst) {
  auto steps = PlanElasticGrowth({E(1, 1, 4, 3), E(2, 1, 4, 1)}, 5, false, 60'000);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].id, 2u);
  EXPECT_EQ(steps[0].delta, 3) << "up to its max of 4";
  EXPECT_EQ(steps[0].reason, "GPUs are idle and nothing waits: 1 -> 4 of at most 4");
  EXPECT_EQ(steps[1].id, 1u);
  EXPECT_EQ(steps[1].delta, 1);
  // Three idle GPUs between two jobs of one GPU each: shared out, 2 and 1.
  steps = PlanElasticGrowth({E(1, 1, 8, 1), E(2, 1, 8, 1)}, 3, false, 60'000);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].delta + steps[1].delta, 3);
  EXPECT_EQ(steps[0].delta, 2);
}

TEST(ElasticGrowth, NothingWhileSomethingWaitsOrInCooldown) {
  EXPECT_TRUE(PlanElasticGrowth({E(1, 1, 4, 1)}, 2, true, 60'000).empty());
  EXPECT_TRUE(
      PlanElasticGrowth({E(1, 1, 4, 1, Priority::kNormal, 50'000)}, 2, false, 60'000).empty());
  EXPECT_EQ(PlanElasticGrowth({E(1, 1, 4, 1, Priority::kNormal, 50'000)}, 2, false, 80'000).size(),
            1u);
  EXPECT_TRUE(PlanElasticGrowth({E(1, 1, 4, 4)}, 2, false, 60'000).empty()) << "at its max";
}

TEST(ElasticShrink, GivesBackAboveTheMinimumLowestPriorityFirst) {
  auto steps = PlanElasticShrink({E(1, 1, 4, 4, Priority::kNormal), E(2, 1, 4, 3, Priority::kLow)},
                                 3, Priority::kNormal);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].id, 2u);
  EXPECT_EQ(steps[0].delta, -2);
  EXPECT_EQ(steps[0].reason, "a waiting job needs GPUs: 3 -> 1 (at least 1)");
  EXPECT_EQ(steps[1].id, 1u);
  EXPECT_EQ(steps[1].delta, -1);
}

TEST(ElasticShrink, NothingWhenTheyCannotFreeEnough) {
  EXPECT_TRUE(PlanElasticShrink({E(1, 2, 4, 3)}, 2, Priority::kNormal).empty());
}

TEST(ElasticShrink, HigherPriorityJobsDoNotShrinkForLowerOnes) {
  EXPECT_TRUE(PlanElasticShrink({E(1, 1, 4, 4, Priority::kHigh)}, 1, Priority::kNormal).empty());
  EXPECT_EQ(PlanElasticShrink({E(1, 1, 4, 4, Priority::kHigh)}, 1, Priority::kHigh).size(), 1u);
}

}  // namespace
}  // namespace gpuslice::core
