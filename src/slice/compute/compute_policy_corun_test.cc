// The compute policy's co-running: slices whose work leaves the
// GPU idle launch beside the holder (PolicyParams::corun).

#include <gtest/gtest.h>

#include <vector>

#include "slice/compute/compute_policy.h"
#include "slice/compute/compute_policy_test_models.h"

namespace gpuslice::slice {
namespace {

using policy_test::ArbiterParams;
using policy_test::kMs;
using policy_test::QueueModel;
using policy_test::Slice;

// Loops that leave the GPU mostly idle: a 30/70 pair of hard slices whose loops
// each keep the GPU busy a quarter of the time they run (short kernels, a
// synchronise after each, CPU work between) use a quarter of the GPU together
// with exclusive turns, where the same two loops reach half of it side by side.
// Co-running (PolicyParams::corun), the pair uses what both loops reach, each
// what it asks for.
TEST(ComputePolicy, APairOfLoopsThatLeaveTheGpuIdleCoRun) {
  for (bool corun : {false, true}) {
    QueueModel m({Slice(300), Slice(700)}, {0.25, 0.25});
    m.params = ArbiterParams(corun);
    m.Run(200 * kMs);  // Both duties measured.
    const uint64_t a0 = m.gpu_ns[0], b0 = m.gpu_ns[1];
    constexpr uint64_t kRun = 5'000 * kMs;
    m.Run(kRun);
    const double a = double(m.gpu_ns[0] - a0) / kRun, b = double(m.gpu_ns[1] - b0) / kRun;
    if (corun) {
      EXPECT_NEAR(a, 0.25, 0.01);
      EXPECT_NEAR(b, 0.25, 0.01);
      EXPECT_GT(double(m.corun_ns) / kRun, 0.95);
    } else {
      EXPECT_LT(a + b, 0.30) << "exclusive turns, shown short";
    }
  }
}

// Co-running never lifts a hard cap: a hard 20% slice whose loop would use
// 30% of the GPU co-runs while its tokens last and is held to 20%, and the
// slice beside it keeps what it asks for.
TEST(ComputePolicy, ACoRunningHardSliceIsHeldToItsShare) {
  QueueModel m({Slice(200), Slice(300)}, {0.3, 0.2});
  m.params = ArbiterParams();
  m.Run(200 * kMs);
  const uint64_t a0 = m.gpu_ns[0], b0 = m.gpu_ns[1], c0 = m.corun_ns;
  constexpr uint64_t kRun = 5'000 * kMs;
  m.Run(kRun);
  EXPECT_NEAR(double(m.gpu_ns[0] - a0) / kRun, 0.20, 0.02);
  EXPECT_NEAR(double(m.gpu_ns[1] - b0) / kRun, 0.20, 0.01);
  EXPECT_GT(double(m.corun_ns - c0) / kRun, 0.3) << "co-ran while it had tokens";
}

// Slices that keep the GPU busy do not co-run (their work would wait behind
// each other's and the split would follow the GPU's time-slicing, not the
// shares): a free-running 30/70 pair keeps exclusive turns and its split.
// (Rarely, a slice whose turns began behind the previous holder's drain
// measures a duty low enough to co-run for a window: 286 ms in 5 s here,
// charged as it used, so the split holds.) A co-runner whose loop turns busy
// loses its co-running within a few duty windows, and the shares hold again.
TEST(ComputePolicy, SlicesThatKeepTheGpuBusyDoNotCoRun) {
  QueueModel busy({Slice(300), Slice(700)}, {1.0, 1.0});
  busy.params = ArbiterParams();
  busy.Run(5'000 * kMs);
  EXPECT_LT(busy.corun_ns, 500 * kMs);
  EXPECT_NEAR(busy.Share(0, 5'000 * kMs), 0.30, 0.02);
  EXPECT_NEAR(busy.Share(1, 5'000 * kMs), 0.70, 0.02);

  QueueModel m({Slice(300), Slice(700)}, {0.2, 0.2});
  m.params = ArbiterParams();
  m.Run(1'000 * kMs);
  ASSERT_GT(m.corun_ns, 500 * kMs);
  m.duty = {1.0, 1.0};
  m.Run(100 * kMs);  // A few duty windows.
  const uint64_t a0 = m.gpu_ns[0], b0 = m.gpu_ns[1], c0 = m.corun_ns;
  constexpr uint64_t kRun = 5'000 * kMs;
  m.Run(kRun);
  EXPECT_LT(m.corun_ns - c0, kRun / 20);
  EXPECT_NEAR(double(m.gpu_ns[0] - a0) / kRun, 0.30, 0.02);
  EXPECT_NEAR(double(m.gpu_ns[1] - b0) / kRun, 0.70, 0.02);
}

// Under caps that hold the split (every slice hard, shares adding
// up to at most 100%), loops that leave gaps co-run even where their duties
// add up to more than kCoRunMaxDutyMilli: a 30/70 pair of loops that each
// keep the GPU busy 60% of the time they run use only 0.6 of it in
// exclusive turns. The caps keep the split. Where they do not hold it (a
// work-conserving slice), the budget applies and the pair takes turns.
TEST(ComputePolicy, UnderCapsThatHoldTheSplitLoopsWithGapsCoRun) {
  double total[2] = {0, 0};  // [capped]
  for (bool capped : {true, false}) {
    QueueModel m({Slice(300), Slice(700, capped ? coord::kModeHard : coord::kModeWorkConserving)},
                 {0.6, 0.6});
    m.params = ArbiterParams();
    m.Run(500 * kMs);  // Duties measured.
    const uint64_t a0 = m.gpu_ns[0], b0 = m.gpu_ns[1], c0 = m.corun_ns;
    constexpr uint64_t kRun = 5'000 * kMs;
    m.Run(kRun);
    const double a = double(m.gpu_ns[0] - a0) / kRun, b = double(m.gpu_ns[1] - b0) / kRun;
    const double corun = double(m.corun_ns - c0) / kRun;
    total[capped] = a + b;
    if (capped) {
      EXPECT_GT(corun, 0.4);
      EXPECT_NEAR(a, 0.30, 0.02) << "the hard cap holds";
    } else {
      EXPECT_LT(corun, 0.05);
    }
  }
  // In this model (submission order, no time-slicing): 0.75 against 0.60.
  EXPECT_GT(total[1], 1.15 * total[0]);
}

// A slice that hides the GPU time it uses cannot get co-running started
// beside busy slices under caps that hold the split: a holder has others
// beside it only when its host duty, measured with nobody beside it, is
// low, and the liar's hidden use cannot lower that. (Measured with the
// co-runners beside it, the duty of a busy holder fell as the liar took
// its GPU time, and two 40% slices kept 22% each under the arbiter:
// ArbiterTest.WhateverASliceWritesIntoItsMembersFileTheOthersKeepTheirShares.)
TEST(ComputePolicy, AHiddenCoRunnerDoesNotGetBusySlicesToHostIt) {
  for (bool dip : {false, true}) {
    QueueModel m({Slice(400), Slice(400), Slice(200)}, {1.0, 1.0, 1.0});
    m.params = ArbiterParams();
    m.liar = 2;
    if (dip) {
      // As if both had just measured a quiet window as the holder (their
      // loops paused): they may have co-runners at first.
      m.Run(m.step_ns);
      for (int i : {0, 1}) {
        m.slices[size_t(i)].duty_milli = m.slices[size_t(i)].host_duty_milli = 500;
        m.slices[size_t(i)].host_measured_ns = m.now;
      }
    }
    constexpr uint64_t kRun = 3'000 * kMs;
    m.Run(kRun);
    // The liar also waits for turns of its own, and pays for them (the
    // arbiter charges a holder that keeps others waiting the wall time its
    // reports do not explain), so it runs out of tokens to co-run with: 1.2%
    // of the run with the dip. A liar that only co-runs is held by the age of
    // the host duty (kHostDutyMaxAgeNs) and by the daemon's audit.
    EXPECT_LT(double(m.corun_ns), dip ? 0.1 * kRun : 0.01 * kRun) << dip;
    EXPECT_GE(m.Share(0, kRun), 0.38) << dip;
    EXPECT_GE(m.Share(1, kRun), 0.38) << dip;
  }
}

// The cooperative file (one user's own slices) lets a holder of
// higher host duty have co-runners under caps that hold the split
// (kCoRunOwnSlicesMaxHostDutyMilli) than the daemon's arbiter does (its
// slices are different users' jobs): a 30/70 pair of loops that keep the GPU
// busy 94% of the time they run (1 ms kernels, a synchronise after each)
// co-runs in the file and takes turns under the arbiter. Either way the
// hard caps keep the split; loops that keep the GPU busy take turns in both.
TEST(ComputePolicy, ACooperativeFileCoRunsLoopsOfHigherHostDuty) {
  PolicyParams file;
  file.corun = true;
  file.corun_capped_max_host_duty_milli = kCoRunOwnSlicesMaxHostDutyMilli;
  for (double duty : {0.94, 1.0}) {
    double corun[2] = {0, 0}, total[2] = {0, 0};  // [in the file]
    for (bool in_file : {false, true}) {
      QueueModel m({Slice(300), Slice(700)}, {duty, duty});
      m.params = in_file ? file : ArbiterParams();
      m.Run(500 * kMs);  // Duties measured.
      const uint64_t a0 = m.gpu_ns[0], b0 = m.gpu_ns[1], c0 = m.corun_ns;
      constexpr uint64_t kRun = 5'000 * kMs;
      m.Run(kRun);
      corun[in_file] = double(m.corun_ns - c0) / kRun;
      const double a = double(m.gpu_ns[0] - a0) / kRun, b = double(m.gpu_ns[1] - b0) / kRun;
      total[in_file] = a + b;
      // The caps hold the split (this model charges a holder under the
      // arbiter for its whole turn: its loop gets its share of the time
      // it runs, 0.30 x duty).
      EXPECT_GE(a, 0.30 * duty - 0.02) << duty << " " << in_file;
      EXPECT_LE(a, 0.32) << duty << " " << in_file;
      EXPECT_GE(b, 0.70 * duty - 0.03) << duty << " " << in_file;
      EXPECT_LE(b, 0.72) << duty << " " << in_file;
    }
    if (duty < 1.0) {
      // 0.31 of the run co-running, the pair at 0.956 against 0.935 here.
      EXPECT_GT(corun[true], 0.2);
      EXPECT_LT(corun[false], 0.02);
      EXPECT_GT(total[true], total[false]);
    } else {
      EXPECT_LT(corun[true], 0.05);
      EXPECT_LT(corun[false], 0.05);
    }
  }
}

// Priority stays exclusive: a slice never co-runs beside a holder of another
// priority, and a high-priority slice with work takes the GPU from a
// co-running pair of normal ones at once (it gets all it asks for).
TEST(ComputePolicy, CoRunningStaysWithinOnePriority) {
  QueueModel m({Slice(300), Slice(300), Slice(400, coord::kModeWorkConserving, 2)},
               {0.2, 0.2, 0.2});
  m.params = ArbiterParams();
  m.slices[2].live = false;
  m.Run(1'000 * kMs);
  EXPECT_GT(m.corun_ns, 500 * kMs) << "the normal pair co-runs";
  m.slices[2].live = true;  // The high-priority slice comes, with work.
  const uint64_t h0 = m.gpu_ns[2];
  m.Run(2'000 * kMs);
  EXPECT_NEAR(double(m.gpu_ns[2] - h0) / (2'000.0 * kMs), 0.2, 0.01);
  EXPECT_EQ(m.corun_across_priorities, 0u);
}

// Only slices whose reports are charged co-run: not one whose processes do
// not report GPU time (an older shim, charged wall time), nor one the
// daemon's audit distrusts.
TEST(ComputePolicy, OnlyTrustedReportsCoRun) {
  for (int kind : {0, 1}) {
    QueueModel m({Slice(300), Slice(700)}, {0.2, 0.2});
    m.params = ArbiterParams();
    if (kind == 0) {
      m.report = false;
    } else {
      m.liar = 0;
      m.distrust_liar = true;
    }
    m.Run(2'000 * kMs);
    EXPECT_EQ(m.corun_ns, 0u) << kind;
  }
}

// A holder whose turn ends beside a co-runner hands the GPU to it in the
// same decision, without waiting for its own drain: the co-runner's work
// runs beside that drain already. (Before, the turn closed until the
// holder drained, then opened to nobody, since a co-runner does not wait
// for a turn; the co-runner stopped launching until the next decision
// opened one for it, and a 30/70 pair of 1 ms launch-then-synchronise
// loops took ~900 turns in 4 s instead of ~400.) A slice that waits for
// a turn of its own still waits for the drain.
TEST(ComputePolicy, ATurnEndingBesideACoRunnerGoesToItAtOnce) {
  for (bool corunning : {true, false}) {
    std::vector<SliceView> slices = {Slice(300), Slice(700)};
    for (SliceView& s : slices) {
      s.live = true;
      s.gpu_time = true;
      s.charged_ns = 100 * kMs;
      s.vtime = 100 * kMs;
      s.duty_milli = s.host_duty_milli = 500;
    }
    const PolicyParams p = ArbiterParams();
    constexpr uint64_t kNow = 1'000 * kMs;
    slices[0].host_measured_ns = kNow;
    TurnView turn;
    turn.holder = 0;
    turn.state = coord::kTurnOpen;
    turn.start_ns = kNow - 5 * kMs;
    turn.end_ns = kNow + 5 * kMs;
    // The holder is out of tokens, its last kernel still on the GPU.
    slices[0].tokens_ns = -int64_t(kMs);
    slices[0].inflight = true;
    slices[1].tokens_ns = 6 * int64_t(kMs);
    slices[1].corun = corunning;
    slices[1].inflight = corunning;  // Launching beside the holder...
    slices[1].waiting = !corunning;  // ...or waiting for a turn.
    Outcome out = Advance(kNow, kNow - 100'000, turn, slices, p);
    EXPECT_TRUE(out.changed) << corunning;
    if (corunning) {
      EXPECT_EQ(turn.holder, 1);
      EXPECT_EQ(turn.state, coord::kTurnOpen);
      EXPECT_FALSE(slices[0].corun) << "out of tokens: not beside the new holder";
    } else {
      EXPECT_EQ(turn.holder, 0);
      EXPECT_EQ(turn.state, coord::kTurnClosing) << "the drain first";
      slices[0].inflight = false;
      Advance(kNow + 100'000, kNow, turn, slices, p);
      EXPECT_EQ(turn.holder, 1);
      EXPECT_EQ(turn.state, coord::kTurnOpen);
    }
  }
}

}  // namespace
}  // namespace gpuslice::slice
