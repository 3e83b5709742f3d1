#include "core/jobs/autoscale.h"

#include <gtest/gtest.h>

namespace gpuslice::core {
namespace {

constexpr int64_t kT0 = 1'000'000;

AutoscalePolicy Policy(uint32_t min = 1, uint32_t max = 4) {
  AutoscalePolicy p;
  p.replicas = {min, max};
  p.target_milli = 700;
  p.scale_up_after_ms = 60'000;
  p.scale_down_after_ms = 300'000;
  p.cooldown_ms = 120'000;
  p.healthy_run_ms = 30'000;
  p.backoff_initial_ms = 5'000;
  p.backoff_max_ms = 40'000;
  p.crash_loop_after = 3;
  return p;
}

ServiceObservation Steady(int64_t now, uint32_t running, double mean) {
  ServiceObservation o;
  o.now_ms = now;
  o.running = running;
  o.mean_use_pct = mean;
  return o;
}

// Feeds one observation a second from `from` to `to` (inclusive) and returns
// the first decision that acted, if any.
ScaleDecision Feed(const AutoscalePolicy& p, AutoscaleState& s, int64_t from, int64_t to,
                   double mean) {
  for (int64_t t = from; t <= to; t += 1000) {
    ScaleDecision d = DecideScale(p, s, Steady(t, s.desired, mean));
    if (d.action != ScaleAction::kNone) return d;
  }
  return {};
}

TEST(ReplicaRange, ParsesACountAndARange) {
  struct Case {
    const char* text;
    uint32_t min, max;
  } cases[] = {{"1-4", 1, 4}, {"3", 3, 3}, {" 2-2 ", 2, 2}, {"1-64", 1, 64}};
  for (const Case& c : cases) {
    auto r = ParseReplicaRange(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().ToString();
    EXPECT_EQ(r->min, c.min) << c.text;
    EXPECT_EQ(r->max, c.max) << c.text;
  }
  EXPECT_EQ(FormatReplicaRange({1, 4}), "1-4");
  EXPECT_EQ(FormatReplicaRange({3, 3}), "3");
}

TEST(ReplicaRange, RefusesBadRangesNamingTheFlagAndToken) {
  for (const char* bad : {"", "0", "0-2", "4-1", "1-65", "a", "1-", "-3", "1-2-3", "1.5"}) {
    auto r = ParseReplicaRange(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--replicas"), std::string::npos) << bad;
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status().message();
  }
}

TEST(AutoscalePolicy, ValidateNamesTheBadField) {
  AutoscalePolicy p = Policy();
  EXPECT_TRUE(p.Validate().ok());
  p.target_milli = 0;
  EXPECT_NE(p.Validate().message().find("--target-util"), std::string::npos);
  p = Policy();
  p.cooldown_ms = -1;
  EXPECT_NE(p.Validate().message().find("--cooldown"), std::string::npos);
  p = Policy();
  p.replicas = {3, 2};
  EXPECT_NE(p.Validate().message().find("--replicas"), std::string::npos);
}

TEST(DecideScale, ScalesUpOnlyAfterTheWholeWindowAboveTarget) {
  AutoscalePolicy p = Policy();
  AutoscaleState s;
  // 59 s above target: nothing yet.
  EXPECT_EQ(Feed(p, s, kT0, kT0 + 59'000, 85).action, ScaleAction::kNone);
  ScaleDecision d = DecideScale(p, s, Steady(kT0 + 60'000, 1, 85));
  EXPECT_EQ(d.action, ScaleAction::kUp);
  EXPECT_EQ(d.desired, 2u);
  EXPECT_EQ(s.desired, 2u);
  EXPECT_EQ(s.last_change_ms, kT0 + 60'000);
  EXPECT_NE(d.reason.find("85.0%"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("1 -> 2"), std::string::npos) << d.reason;
}

TEST(DecideScale, ADipToTargetRestartsTheWindow) {
  AutoscalePolicy p = Policy();
  AutoscaleState s;
  EXPECT_EQ(Feed(p, s, kT0, kT0 + 50'000, 90).action, ScaleAction::kNone);
  // At the target is not above it.
  EXPECT_EQ(DecideScale(p, s, Steady(kT0 + 51'000, 1, 70)).action, ScaleAction::kNone);
  EXPECT_FALSE(s.above_since_ms);
  EXPECT_EQ(Feed(p, s, kT0 + 52'000, kT0 + 111'000, 90).action, ScaleAction::kNone);
  EXPECT_EQ(DecideScale(p, s, Steady(kT0 + 112'000, 1, 90)).action, ScaleAction::kUp);
}

TEST(DecideScale, NoScaleUpWhileAReplicaIsPending) {
  AutoscalePolicy p = Policy();
  AutoscaleState s;
  s.desired = 2;
  for (int64_t t = kT0; t < kT0 + 600'000; t += 1000) {
    ServiceObservation o = Steady(t, 1, 100);
    o.pending = 1;  // The second replica waits for room: it is not capacity.
    ASSERT_EQ(DecideScale(p, s, o).action, ScaleAction::kNone) << t;
  }
  EXPECT_EQ(s.desired, 2u);
  // Once it runs, a fresh window is needed.
  EXPECT_EQ(DecideScale(p, s, Steady(kT0 + 600'000, 2, 100)).action, ScaleAction::kNone);
  EXPECT_EQ(s.above_since_ms, kT0 + 600'000);
}

TEST(DecideScale, NoDecisionWithoutASampleOrWhileStopping) {
  AutoscalePolicy p = Policy();
  AutoscaleState s;
  ServiceObservation o = Steady(kT0, 1, 0);
  o.mean_use_pct.reset();
  for (int64_t t = kT0; t < kT0 + 120'000; t += 1000) {
    o.now_ms = t;
    ASSERT_EQ(DecideScale(p, s, o).action, ScaleAction::kNone);
  }
  s.desired = 2;
  o = Steady(kT0, 2, 100);
  o.stopping = 1;
  for (int64_t t = kT0; t < kT0 + 120'000; t += 1000) {
    o.now_ms = t;
    ASSERT_EQ(DecideScale(p, s, o).action, ScaleAction::kNone);
  }
}

TEST(DecideScale, CoolDownSeparatesChangesAndWindowsRestartAfterEach) {
  AutoscalePolicy p = Policy();
  AutoscaleState s;
  ASSERT_EQ(Feed(p, s, kT0, kT0 + 60'000, 95).action, ScaleAction::kUp);  // At +60 s.
  EXPECT_FALSE(s.above_since_ms);
  // Still hot with 2 replicas: the window (60 s) is over at +121 s, but the
  // cool-down (120 s) only at +180 s.
  ScaleDecision d = Feed(p, s, kT0 + 61'000, kT0 + 400'000, 95);
  EXPECT_EQ(d.action, ScaleAction::kUp);
  EXPECT_EQ(d.desired, 3u);
  EXPECT_EQ(s.last_change_ms, kT0 + 180'000);
}

TEST(DecideScale, StopsAtTheMaximumAndTheMinimum) {
  AutoscalePolicy p = Policy(2, 3);
  AutoscaleState s;
  s.desired = 3;
  EXPECT_EQ(Feed(p, s, kT0, kT0 + 3'600'000, 100).action, ScaleAction::kNone);
  EXPECT_EQ(s.desired, 3u);
  AutoscaleState low;
  low.desired = 2;
  EXPECT_EQ(Feed(p, low, kT0, kT0 + 3'600'000, 0).action, ScaleAction::kNone);
  EXPECT_EQ(low.desired, 2u);
}

TEST(DecideScale, ScalesDownOnlyBelowTheShareThatKeepsTheRestUnderTarget) {
  AutoscalePolicy p = Policy();
  // 3 replicas at target 70%: removing one leaves 3*m/2, under 70% only
  // when m < 46.7%.
  EXPECT_NEAR(ScaleDownBelowPct(p, 3), 46.67, 0.01);
  EXPECT_NEAR(ScaleDownBelowPct(p, 2), 35.0, 1e-9);
  AutoscaleState s;
  s.desired = 3;
  EXPECT_EQ(Feed(p, s, kT0, kT0 + 900'000, 50).action, ScaleAction::kNone)
      << "50% x 3 over 2 replicas would be 75%, above target";
  ScaleDecision d = Feed(p, s, kT0 + 901'000, kT0 + 1'300'000, 40);
  ASSERT_EQ(d.action, ScaleAction::kDown);
  EXPECT_EQ(d.desired, 2u);
  EXPECT_EQ(s.last_change_ms, kT0 + 901'000 + 300'000);
  EXPECT_NE(d.reason.find("3 -> 2"), std::string::npos) << d.reason;
}

TEST(DecideScale, ASingleReplicaAboveTheMinimumIsNeverRemovedByUse) {
  AutoscalePolicy p = Policy(1, 4);
  AutoscaleState s;
  s.desired = 1;
  EXPECT_EQ(Feed(p, s, kT0, kT0 + 3'600'000, 0).action, ScaleAction::kNone);
}

TEST(DecideScale, AHandSetCountStartsACoolDown) {
  AutoscalePolicy p = Policy();
  AutoscaleState s;
  ASSERT_TRUE(SetDesired(p, s, 3, kT0).ok());
  EXPECT_EQ(s.desired, 3u);
  // Idle at 3 from the start: the window (300 s) is over at +300 s, and the
  // cool-down (120 s) is long past.
  ScaleDecision d = Feed(p, s, kT0, kT0 + 400'000, 0);
  EXPECT_EQ(d.action, ScaleAction::kDown);
  EXPECT_EQ(s.last_change_ms, kT0 + 300'000);
  Status bad = SetDesired(p, s, 5, kT0);
  EXPECT_EQ(bad.code(), StatusCode::kOutOfRange);
  EXPECT_NE(bad.message().find("1-4"), std::string::npos) << bad.message();
}

TEST(DecideScale, ANewRangeClampsDesired) {
  AutoscalePolicy p = Policy();
  AutoscaleState s;
  s.desired = 4;
  ApplyRange(p, s, {1, 2}, kT0);
  EXPECT_EQ(s.desired, 2u);
  EXPECT_EQ(s.last_change_ms, kT0);
  ApplyRange(p, s, {3, 5}, kT0 + 1);
  EXPECT_EQ(s.desired, 3u);
  ApplyRange(p, s, {1, 8}, kT0 + 2);
  EXPECT_EQ(s.desired, 3u);
  EXPECT_EQ(s.last_change_ms, kT0 + 1) << "no clamp, no change";
}

TEST(SliceUse, IsRelativeToTheComputeShare) {
  EXPECT_DOUBLE_EQ(SliceUsePct(30, 300), 100);
  EXPECT_DOUBLE_EQ(SliceUsePct(15, 300), 50);
  EXPECT_DOUBLE_EQ(SliceUsePct(45, 300), 100) << "capped";
  EXPECT_DOUBLE_EQ(SliceUsePct(42, 0), 42) << "no share: as is";
}

TEST(Restart, AReplicaThatServedIsReplacedAtOnce) {
  AutoscalePolicy p = Policy();
  AutoscaleState s;
  RestartDecision r = OnReplicaEnded(p, s, {.ran_ms = 600'000}, kT0);
  EXPECT_FALSE(r.failure);
  EXPECT_EQ(r.replace_at_ms, kT0);
  EXPECT_EQ(ReplicasToStart(s, 0, kT0), 1u);
}

TEST(Restart, QuickFailuresBackOffExponentiallyUpToTheMaximum) {
  AutoscalePolicy p = Policy();
  AutoscaleState s;
  int64_t expected[] = {5'000, 10'000, 20'000, 40'000, 40'000};
  int64_t now = kT0;
  for (int64_t delay : expected) {
    RestartDecision r = OnReplicaEnded(p, s, {.ran_ms = 1'000}, now);
    EXPECT_TRUE(r.failure);
    EXPECT_EQ(r.replace_at_ms, now + delay);
    EXPECT_EQ(ReplicasToStart(s, 0, now + delay - 1), 0u);
    EXPECT_EQ(ReplicasToStart(s, 0, now + delay), 1u);
    now += delay;
  }
}

TEST(Restart, ACrashLoopIsReportedOnceAndEndsWhenAReplicaStaysUp) {
  AutoscalePolicy p = Policy();
  AutoscaleState s;
  EXPECT_FALSE(OnReplicaEnded(p, s, {.ran_ms = 0}, kT0).entered_crash_loop);
  EXPECT_FALSE(OnReplicaEnded(p, s, {.ran_ms = 10}, kT0 + 10'000).entered_crash_loop);
  EXPECT_TRUE(OnReplicaEnded(p, s, {.ran_ms = 10}, kT0 + 30'000).entered_crash_loop);
  EXPECT_TRUE(s.crash_loop);
  EXPECT_FALSE(OnReplicaEnded(p, s, {.ran_ms = 10}, kT0 + 60'000).entered_crash_loop);
  EXPECT_FALSE(OnReplicaRunning(p, s, 29'999));
  EXPECT_TRUE(s.crash_loop);
  EXPECT_TRUE(OnReplicaRunning(p, s, 30'000));
  EXPECT_FALSE(s.crash_loop);
  EXPECT_EQ(s.consecutive_failures, 0u);
  EXPECT_FALSE(OnReplicaRunning(p, s, 40'000)) << "reported once";
}

TEST(Restart, StoppedByTheServiceIsNotAFailure) {
  AutoscalePolicy p = Policy();
  AutoscaleState s;
  RestartDecision r = OnReplicaEnded(p, s, {.ran_ms = 10, .stopped_by_service = true}, kT0);
  EXPECT_FALSE(r.failure);
  EXPECT_EQ(s.consecutive_failures, 0u);
}

TEST(Restart, ReplicasToStartFillsUpToDesired) {
  AutoscaleState s;
  s.desired = 3;
  EXPECT_EQ(ReplicasToStart(s, 0, kT0), 3u);
  EXPECT_EQ(ReplicasToStart(s, 3, kT0), 0u);
  EXPECT_EQ(ReplicasToStart(s, 4, kT0), 0u);
}

TEST(ChooseReplicaToStop, PendingFirstThenTheNewestRunning) {
  EXPECT_FALSE(ChooseReplicaToStop({}));
  std::vector<ReplicaInfo> r = {{1, true, 100}, {2, true, 300}, {3, true, 200}};
  EXPECT_EQ(ChooseReplicaToStop(r), 2u);
  r.push_back({4, false, 50});
  EXPECT_EQ(ChooseReplicaToStop(r), 4u);
  r.push_back({5, false, 60});
  EXPECT_EQ(ChooseReplicaToStop(r), 5u);
}

}  // namespace
}  // namespace gpuslice::core
