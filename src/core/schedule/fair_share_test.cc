#include "core/schedule/fair_share.h"

#include <gtest/gtest.h>

#include <cmath>

namespace gpuslice::core {
namespace {

constexpr int64_t kHour = 3600 * 1000;
const Principal kAlice{PrincipalKind::kUser, "alice"};
const Principal kBob{PrincipalKind::kUser, "bob"};
const Principal kMl{PrincipalKind::kGroup, "ml"};

TEST(DecayedUsage, AShortIntervalCountsItsGpuSeconds) {
  DecayedUsage u(7 * 24 * kHour);
  u.AddInterval(kAlice, 2.0, 0, 60'000);  // 2 GPUs for a minute.
  EXPECT_NEAR(u.At(kAlice, 60'000), 120.0, 0.01);
  EXPECT_EQ(u.At(kBob, 60'000), 0.0);
}

TEST(DecayedUsage, HalfIsLeftAfterOneHalfLife) {
  DecayedUsage u(kHour);
  u.AddInterval(kAlice, 1.0, 0, 1000);
  const double now = u.At(kAlice, 1000);
  EXPECT_NEAR(u.At(kAlice, 1000 + kHour), now / 2, 1e-9);
  EXPECT_NEAR(u.At(kAlice, 1000 + 2 * kHour), now / 4, 1e-9);
}

TEST(DecayedUsage, ChargesInAnyOrderGiveTheSameTotal) {
  DecayedUsage a(kHour), b(kHour);
  a.AddInterval(kAlice, 1.0, 0, kHour);
  a.AddInterval(kAlice, 0.5, kHour, 3 * kHour);
  b.AddInterval(kAlice, 0.5, kHour, 3 * kHour);
  b.AddInterval(kAlice, 1.0, 0, kHour);
  EXPECT_NEAR(a.At(kAlice, 4 * kHour), b.At(kAlice, 4 * kHour), 1e-9);
  // One interval split in two adds up to the whole.
  DecayedUsage whole(kHour), halves(kHour);
  whole.AddInterval(kBob, 1.0, 0, 2 * kHour);
  halves.AddInterval(kBob, 1.0, 0, kHour);
  halves.AddInterval(kBob, 1.0, kHour, 2 * kHour);
  EXPECT_NEAR(whole.At(kBob, 2 * kHour), halves.At(kBob, 2 * kHour), 1e-6);
}

TEST(FairShareFactors, NoUsageIsOneAndExactlyTheShareIsAHalf) {
  FairShareConfig config;
  auto f = FairShareFactors({{kAlice, 100.0}, {kBob, 100.0}}, {kAlice, kBob}, config);
  EXPECT_NEAR(f[kAlice], 0.5, 1e-12);
  EXPECT_NEAR(f[kBob], 0.5, 1e-12);
  f = FairShareFactors({}, {kAlice, kBob}, config);
  EXPECT_EQ(f[kAlice], 1.0);
}

TEST(FairShareFactors, TheHeavierUserGetsTheLowerFactor) {
  FairShareConfig config;
  auto f = FairShareFactors({{kAlice, 300.0}, {kBob, 100.0}}, {kAlice, kBob}, config);
  EXPECT_LT(f[kAlice], f[kBob]);
  EXPECT_NEAR(f[kAlice], std::exp2(-1.5), 1e-12);  // 3/4 of the use, 1/2 of the shares.
}

TEST(FairShareFactors, ADoubleShareMayUseTwiceAsMuchForTheSameFactor) {
  FairShareConfig config;
  bool known = false;
  ASSERT_TRUE(config.Apply("share.user.alice", "2", &known).ok());
  auto f = FairShareFactors({{kAlice, 200.0}, {kBob, 100.0}}, {kAlice, kBob}, config);
  EXPECT_NEAR(f[kAlice], f[kBob], 1e-12);
}

TEST(FairShareFactors, UsersAndGroupsAreNormalisedApart) {
  FairShareConfig config;
  auto f = FairShareFactors({{kAlice, 100.0}, {kMl, 100.0}}, {kAlice, kBob, kMl}, config);
  EXPECT_NEAR(f[kMl], 0.5, 1e-12);                 // The only group: all of it.
  EXPECT_NEAR(f[kAlice], std::exp2(-2.0), 1e-12);  // All the use, half the shares.
  EXPECT_NEAR(JobFairShare(f, "alice", "ml"), (std::exp2(-2.0) + 0.5) / 2, 1e-12);
  EXPECT_EQ(JobFairShare(f, "carol", ""), 1.0);
}

TEST(QueueRank, AgeGrowsToOneAtTheMaximumAgeAndNoFurther) {
  FairShareConfig config;
  config.max_age_ms = kHour;
  EXPECT_NEAR(QueueRank(0.5, kHour / 2, config), 1.0, 1e-12);
  EXPECT_NEAR(QueueRank(0.5, 10 * kHour, config), 1.5, 1e-12);
  config.enabled = false;  // Age alone: arrival order.
  EXPECT_NEAR(QueueRank(0.5, kHour / 2, config), 0.5, 1e-12);
}

TEST(FairShareConfig, SettingsParseAndBadOnesNameTheKey) {
  FairShareConfig c;
  bool known = false;
  ASSERT_TRUE(c.Apply("fair_share_half_life", "2d", &known).ok());
  EXPECT_EQ(c.half_life_ms, 2 * 24 * kHour);
  ASSERT_TRUE(c.Apply("fair_share", "off", &known).ok());
  EXPECT_FALSE(c.enabled);
  ASSERT_TRUE(c.Apply("queue_max_age", "12h", &known).ok());
  EXPECT_EQ(c.max_age_ms, 12 * kHour);
  Status s = c.Apply("share.group.ml", "-1", &known);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("share.group.ml"), std::string::npos) << s.message();
  EXPECT_FALSE(c.Apply("fair_share", "maybe", &known).ok());
  ASSERT_TRUE(c.Apply("policy", "binpack", &known).ok());
  EXPECT_FALSE(known);
}

TEST(HeldGpuWeight, AsAccountingWeighsIt) {
  ResourceRequest whole;
  whole.kind = RequestKind::kWholeGpus;
  Allocation two;
  two.gpu_indices = {0, 1};
  EXPECT_EQ(HeldGpuWeight(whole, two, 0), 2.0);
  ResourceRequest frac;
  frac.kind = RequestKind::kFraction;
  Allocation share;
  share.gpu_indices = {0};
  share.compute_milli = 300;
  EXPECT_NEAR(HeldGpuWeight(frac, share, 80ull << 30), 0.3, 1e-12);
  Allocation mem;
  mem.gpu_indices = {0};
  mem.memory_bytes_per_gpu = 20ull << 30;
  EXPECT_NEAR(HeldGpuWeight(frac, mem, 80ull << 30), 0.25, 1e-12);
  ResourceRequest mig;
  mig.kind = RequestKind::kMig;
  mig.mig = {2, 20};
  EXPECT_NEAR(HeldGpuWeight(mig, share, 0), 2.0 / 7, 1e-12);
}

}  // namespace
}  // namespace gpuslice::core
