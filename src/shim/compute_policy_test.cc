#include "shim/compute_policy.h"

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <vector>

namespace gpuslice::shim {
namespace {

constexpr uint64_t kMs = 1'000'000;

// A discrete model of slices on one GPU driven by the policy: every step of
// `step_ns` the GPU runs the open holder (if it has work), a closing holder
// drains for `drain_ns`, and Advance decides. Returns GPU ns per slice.
struct Model {
  std::vector<SliceView> slices;
  TurnView turn;
  PolicyParams params;
  uint64_t now = 0;
  uint64_t step_ns = 100'000;
  uint64_t drain_ns = 200'000;
  uint64_t drain_left = 0;
  std::vector<uint64_t> gpu_ns;
  // Whether slice i has work at time t.
  std::function<bool(size_t, uint64_t)> backlogged = [](size_t, uint64_t) { return true; };

  explicit Model(std::vector<SliceView> s) : slices(std::move(s)), gpu_ns(slices.size(), 0) {
    for (auto& v : slices) v.live = true;
  }

  void Run(uint64_t duration_ns) {
    const uint64_t end = now + duration_ns;
    while (now < end) {
      const uint64_t last = now;
      now += step_ns;
      for (size_t i = 0; i < slices.size(); ++i) {
        const bool work = backlogged(i, now);
        const bool holds = int32_t(i) == turn.holder;
        const bool open = holds && turn.state == coord::kTurnOpen;
        // Work queued before the turn closed still runs while it drains.
        const bool draining = holds && turn.state == coord::kTurnClosing && drain_left > 0;
        if ((open && work) || draining) gpu_ns[i] += step_ns;
        slices[i].waiting = work && !open;
        slices[i].inflight =
            (open && work) || (holds && turn.state == coord::kTurnClosing && drain_left > 0);
      }
      if (turn.state == coord::kTurnClosing && drain_left > 0) {
        drain_left = drain_left > step_ns ? drain_left - step_ns : 0;
      }
      const coord::TurnState before = turn.state;
      Advance(now, last, turn, slices, params);
      if (before != coord::kTurnClosing && turn.state == coord::kTurnClosing) drain_left = drain_ns;
    }
  }

  double Share(size_t i, uint64_t total) const { return double(gpu_ns[i]) / double(total); }
};

SliceView Slice(uint32_t milli, coord::Mode mode = coord::kModeHard, uint32_t priority = 1) {
  SliceView v;
  v.share_milli = milli;
  v.mode = mode;
  v.priority = priority;
  return v;
}

TEST(ComputePolicy, TwoHardSlicesSplitInProportionToShares) {
  for (auto [a, b] : {std::pair{300u, 700u}, std::pair{100u, 900u}}) {
    Model m({Slice(a), Slice(b)});
    m.Run(10'000 * kMs);
    const uint64_t used = m.gpu_ns[0] + m.gpu_ns[1];
    EXPECT_NEAR(double(m.gpu_ns[0]) / double(used), a / 1000.0, 0.01) << a << "/" << b;
    EXPECT_NEAR(m.Share(0, 10'000 * kMs), a / 1000.0, 0.02);
    EXPECT_NEAR(m.Share(1, 10'000 * kMs), b / 1000.0, 0.02);
  }
}

TEST(ComputePolicy, ThreeSlicesGetTheirShares) {
  Model m({Slice(250), Slice(250), Slice(500)});
  m.Run(10'000 * kMs);
  EXPECT_NEAR(m.Share(0, 10'000 * kMs), 0.25, 0.02);
  EXPECT_NEAR(m.Share(1, 10'000 * kMs), 0.25, 0.02);
  EXPECT_NEAR(m.Share(2, 10'000 * kMs), 0.50, 0.02);
}

TEST(ComputePolicy, HardCapHoldsEvenAlone) {
  Model m({Slice(500)});
  m.Run(5'000 * kMs);
  EXPECT_NEAR(m.Share(0, 5'000 * kMs), 0.5, 0.02);
}

TEST(ComputePolicy, WorkConservingSliceAloneUsesTheWholeGpu) {
  Model m({Slice(300, coord::kModeWorkConserving)});
  m.Run(2'000 * kMs);
  EXPECT_GT(m.Share(0, 2'000 * kMs), 0.97);
}

TEST(ComputePolicy, WorkConservingGivesIdleTimeBackWithinATurn) {
  // Slice 1 is idle for the first second, then busy.
  Model m({Slice(300, coord::kModeWorkConserving), Slice(700, coord::kModeWorkConserving)});
  m.backlogged = [](size_t i, uint64_t t) { return i == 0 || t >= 1'000 * kMs; };
  m.Run(1'000 * kMs);
  EXPECT_GT(m.Share(0, 1'000 * kMs), 0.97);
  // Within 100 ms of slice 1 arriving it runs.
  const uint64_t before = m.gpu_ns[1];
  m.Run(100 * kMs);
  EXPECT_GT(m.gpu_ns[1] - before, 40 * kMs);
  // And from then on the shares hold: slice 0 does not pay for its idle-time use.
  const uint64_t a0 = m.gpu_ns[0], b0 = m.gpu_ns[1];
  m.Run(5'000 * kMs);
  EXPECT_NEAR(double(m.gpu_ns[0] - a0) / (5'000.0 * kMs), 0.3, 0.02);
  EXPECT_NEAR(double(m.gpu_ns[1] - b0) / (5'000.0 * kMs), 0.7, 0.02);
}

TEST(ComputePolicy, HighPriorityTakesTheGpuAtOnce) {
  Model m({Slice(500, coord::kModeWorkConserving, 0), Slice(500, coord::kModeWorkConserving, 2)});
  // The high-priority slice has a request every 50 ms.
  m.backlogged = [](size_t i, uint64_t t) { return i == 0 || (t / kMs) % 50 < 5; };
  m.Run(1'000 * kMs);
  // Its 5 ms of work every 50 ms all ran: it waited at most a step each time.
  EXPECT_GE(m.gpu_ns[1], 95 * kMs);
  EXPECT_GT(m.gpu_ns[0], 800 * kMs);  // The rest went to the best-effort slice.
}

TEST(ComputePolicy, NewShareTakesEffectWithinATurn) {
  Model m({Slice(500), Slice(500)});
  m.Run(1'000 * kMs);
  m.slices[0].share_milli = 200;
  m.slices[1].share_milli = 800;
  m.Run(50 * kMs);  // Settle.
  const uint64_t a0 = m.gpu_ns[0];
  m.Run(1'000 * kMs);
  EXPECT_NEAR(double(m.gpu_ns[0] - a0) / (1'000.0 * kMs), 0.2, 0.03);
}

TEST(ComputePolicy, DeadHolderLosesTheGpu) {
  Model m({Slice(500), Slice(500)});
  m.Run(30 * kMs);
  const int32_t holder = m.turn.holder;
  ASSERT_GE(holder, 0);
  m.slices[size_t(holder)].live = false;
  m.backlogged = [holder](size_t i, uint64_t) { return int32_t(i) != holder; };
  m.Run(2 * kMs);
  EXPECT_NE(m.turn.holder, holder);
}

TEST(ComputePolicy, EligibilityFollowsModeAndTokens) {
  SliceView s = Slice(300);
  s.live = true;
  s.waiting = true;
  s.tokens_ns = 0;
  EXPECT_FALSE(Eligible(s));
  s.tokens_ns = 1;
  EXPECT_FALSE(Eligible(s));  // Not worth a hand-over yet.
  // Issue 19: nor a turn of 2 ms. Hard slices whose shares sum to 100% are
  // charged all the GPU's time between them, so their buckets hold little
  // more than the threshold: with 1 ms turns a 30/70 pair handed over ~230
  // times a second and left 3-4% of the GPU idle.
  s.tokens_ns = 2 * int64_t(kMs);
  EXPECT_FALSE(Eligible(s));
  s.tokens_ns = 4 * int64_t(kMs);
  EXPECT_TRUE(Eligible(s));
  s.tokens_ns = -5;
  s.mode = coord::kModeWorkConserving;
  EXPECT_TRUE(Eligible(s));
  s.share_milli = 0;
  EXPECT_FALSE(Eligible(s));
}

TEST(ComputePolicy, OveruseIsChargedToTheNextPeriod) {
  SliceView s = Slice(500);
  s.tokens_ns = 10 * int64_t(kMs);
  Charge(s, 30 * kMs);
  EXPECT_EQ(s.tokens_ns, -20 * int64_t(kMs));
  EXPECT_EQ(s.vtime, 60 * kMs);
  EXPECT_EQ(TurnLength(s, PolicyParams{}), PolicyParams{}.min_turn_ns);
}

// Issue 13: a holder that says it waits but never reports work in flight
// was never charged, kept the smallest virtual time and took every other
// turn. With charge_blocking_holder (the daemon's arbiter) its open turns
// cost it their wall time while another slice waits.
TEST(ComputePolicy, Issue13AHolderThatNeverReportsWorkPaysForTheTurnsItBlocks) {
  for (bool blocking : {false, true}) {
    Model m({Slice(100), Slice(900)});
    m.params.charge_blocking_holder = blocking;
    // Slice 0 lies: waiting always, never in flight; it uses its turns all
    // the same (the model's GPU gives it the time).
    m.Run(0);
    uint64_t used[2] = {0, 0};
    const uint64_t end = 5'000 * kMs;
    while (m.now < end) {
      const uint64_t last = m.now;
      m.now += m.step_ns;
      for (size_t i = 0; i < 2; ++i) {
        const bool open = int32_t(i) == m.turn.holder && m.turn.state == coord::kTurnOpen;
        if (open) used[i] += m.step_ns;
        m.slices[i].waiting = i == 0 ? true : !open;
        m.slices[i].inflight = i == 0 ? false : open;
      }
      Advance(m.now, last, m.turn, m.slices, m.params);
    }
    const double liar = double(used[0]) / double(used[0] + used[1]);
    if (blocking) {
      EXPECT_NEAR(liar, 0.10, 0.02);
    } else {
      EXPECT_GT(liar, 0.30) << "the cooperative rule, shown to be exploitable";
    }
  }
}

// Issue 13: the arbiter decides on its own clock, so a decision's report of
// work in flight may be up to a tick old or new. Charged from the report of
// the decision that ends an interval, a slice paid for the interval before
// its work started (its launcher waking up after the turn opened); charged
// from the report that starts it, it pays from its start to its drain.
TEST(ComputePolicy, Issue13ChargedFromThePreviousReportASlicePaysFromItsStartToItsDrain) {
  for (bool previous : {false, true}) {
    PolicyParams p;
    p.charge_from_previous_report = previous;
    SliceView slices[1] = {Slice(500)};
    slices[0].live = true;
    slices[0].waiting = true;
    TurnView turn;
    Advance(1 * kMs, 0, turn, slices, p);  // Opens the turn; nothing launched yet.
    ASSERT_EQ(turn.holder, 0);
    const uint64_t before = slices[0].charged_ns;
    // The launch 150 us later: the launcher rings, the arbiter decides.
    slices[0].waiting = false;
    slices[0].inflight = true;
    Advance(1 * kMs + 150'000, 1 * kMs, turn, slices, p);
    // 400 us of work, drained: rung again.
    Advance(1 * kMs + 350'000, 1 * kMs + 150'000, turn, slices, p);
    slices[0].inflight = false;
    Advance(1 * kMs + 550'000, 1 * kMs + 350'000, turn, slices, p);
    // Idle afterwards: nothing more.
    Advance(1 * kMs + 750'000, 1 * kMs + 550'000, turn, slices, p);
    const uint64_t charged = slices[0].charged_ns - before;
    if (previous) {
      EXPECT_EQ(charged, 400'000u);
    } else {
      EXPECT_EQ(charged, 350'000u) << "the wake-up charged, the last 200 us of work not";
    }
  }
}

// Issue 19: a GPU that runs the slices' queued work in submission order
// (work a new holder queues waits behind the old holder's drain), with
// slices charged by the GPU time they report. A slice with `duty` 1 keeps
// `depth_ns` queued while its turn is open (free-running); one with a duty
// below 1 launches a kernel only once the previous one ended, so it keeps
// the GPU busy that fraction of its turn (launch, synchronise, CPU gap).
struct QueueModel {
  std::vector<SliceView> slices;
  std::vector<double> duty;
  TurnView turn;
  PolicyParams params;
  uint64_t now = 0;
  uint64_t step_ns = 20'000;
  uint64_t depth_ns = 1'000'000;
  bool report = true;  // Slices report GPU time (SliceView::gpu_time).
  // A new holder's first launch comes this long after its turn opened.
  uint64_t wake_ns = 100'000;
  std::vector<uint64_t> queued, gpu_ns, open_ns;
  std::deque<std::pair<size_t, uint64_t>> fifo;  // (slice, ns) in submission order.
  // Slice i under-reports: says it waits, reports no GPU time and nothing in
  // flight, and uses its turns as the others do.
  int liar = -1;
  // The liar's reports are disregarded (the daemon's audit caught it).
  bool distrust_liar = false;

  QueueModel(std::vector<SliceView> s, std::vector<double> d)
      : slices(std::move(s)),
        duty(std::move(d)),
        queued(slices.size(), 0),
        gpu_ns(slices.size(), 0),
        open_ns(slices.size(), 0) {
    for (auto& v : slices) v.live = true;
  }

  void Run(uint64_t duration_ns) {
    const uint64_t end = now + duration_ns;
    while (now < end) {
      const uint64_t last = now;
      now += step_ns;
      uint32_t running = 0;
      for (size_t i = 0; i < slices.size(); ++i) {
        if (!Runs(i)) continue;
        ++running;
        if (slices[i].corun && slices[i].priority != slices[size_t(turn.holder)].priority) {
          ++corun_across_priorities;
        }
        open_ns[i] += step_ns;
        // Its launcher wakes up (a co-runner launches at once).
        if (!slices[i].corun && now < turn.start_ns + wake_ns) continue;
        uint64_t add = 0;
        if (duty[i] >= 1) {
          add = depth_ns > queued[i] ? depth_ns - queued[i] : 0;
        } else if (queued[i] == 0) {
          add = uint64_t(double(step_ns) * duty[i]);
        }
        if (add > 0) {
          queued[i] += add;
          fifo.push_back({i, add});
        }
      }
      std::vector<uint64_t> ran(slices.size(), 0);
      for (uint64_t budget = step_ns; budget > 0 && !fifo.empty();) {
        auto& [who, ns] = fifo.front();
        const uint64_t take = std::min(budget, ns);
        ran[who] += take;
        queued[who] -= take;
        budget -= take;
        ns -= take;
        if (ns == 0) fifo.pop_front();
      }
      if (running > 1) corun_ns += step_ns;
      for (size_t i = 0; i < slices.size(); ++i) {
        gpu_ns[i] += ran[i];
        const bool open = Runs(i);
        SliceView& v = slices[i];
        v.distrusted = distrust_liar && int(i) == liar;
        v.gpu_time = report;
        v.gpu_ns = int(i) == liar ? 0 : ran[i];
        v.waiting = int(i) == liar || !open;
        // A synchronising loop's batch is in flight while it runs (the shim
        // covers its whole batch); a queue is in flight until it drained.
        v.inflight = int(i) != liar && (queued[i] > 0 || (open && duty[i] < 1));
      }
      const Outcome out = Advance(now, last, turn, slices, params);
      if (out.changed && turn.state == coord::kTurnOpen) ++turns;
    }
  }

  // Slice i may launch: it holds an open turn, or co-runs beside the holder
  // (SliceView::corun, as the last decision published it).
  bool Runs(size_t i) const {
    const bool open = int32_t(i) == turn.holder && turn.state == coord::kTurnOpen;
    return open || (slices[i].corun && turn.state != coord::kTurnNone);
  }

  double Share(size_t i, uint64_t total) const { return double(gpu_ns[i]) / double(total); }
  uint64_t turns = 0;
  uint64_t corun_ns = 0;                 // Time more than one slice could launch.
  uint64_t corun_across_priorities = 0;  // Steps a co-runner's priority was not the holder's.
};

// The arbiter's parameters (daemon/arbiter.h).
PolicyParams ArbiterParams(bool corun = true) {
  PolicyParams p;
  p.charge_blocking_holder = true;
  p.charge_from_previous_report = true;
  p.corun = corun;
  return p;
}

// Slice 0 (`liar_milli`, QueueModel::liar) beside an honest slice, both
// always busy, for kLiarRunNs, charged as the arbiter charges (`blocking`:
// PolicyParams::charge_blocking_holder; `distrust`: the daemon's audit
// caught the liar).
constexpr uint64_t kLiarRunNs = 10'000 * kMs;
QueueModel RunLiar(uint32_t liar_milli, uint32_t honest_milli, bool blocking, bool distrust) {
  QueueModel m({Slice(liar_milli), Slice(honest_milli)}, {1.0, 1.0});
  m.liar = 0;
  m.distrust_liar = distrust;
  m.params.charge_blocking_holder = blocking;
  m.params.charge_from_previous_report = true;
  m.Run(kLiarRunNs);
  return m;
}

// Issue 19, weak spot 1: a hard 30% slice alone whose loop keeps the GPU
// busy 60% of the time it runs (short kernels, a synchronise after each)
// was charged the wall time its batches were in flight and got 0.3 x 0.6 of
// the GPU. Charged the GPU time it reports, it gets its 30%, in either
// charging rule of the arbiter.
TEST(ComputePolicy, Issue19ASynchronisingHardSliceAloneGetsItsShare) {
  for (bool report : {false, true}) {
    for (bool arbiter : {false, true}) {
      QueueModel m({Slice(300)}, {0.6});
      m.report = report;
      m.params.charge_blocking_holder = arbiter;
      m.params.charge_from_previous_report = arbiter;
      m.Run(5'000 * kMs);
      if (report) {
        EXPECT_NEAR(m.Share(0, 5'000 * kMs), 0.30, 0.01) << arbiter;
      } else {
        EXPECT_LT(m.Share(0, 5'000 * kMs), 0.20) << "the wall-time charge, shown short";
      }
    }
  }
}

// Issue 19, weak spot 3: launches of (next to) no GPU time were charged the
// wall time they were in flight, so a 30% slice could launch 30% of the
// time. Charged by GPU time its turns stay open.
TEST(ComputePolicy, Issue19AnEmptyLaunchLoopIsNotThrottled) {
  for (bool report : {false, true}) {
    QueueModel m({Slice(300)}, {0.001});
    m.report = report;
    m.Run(2'000 * kMs);
    const double open = double(m.open_ns[0]) / (2'000.0 * kMs);
    if (report) {
      EXPECT_GT(open, 0.97);
    } else {
      EXPECT_LT(open, 0.40);
    }
  }
}

// Issue 19, weak spot 2: hand-overs cost a 30/70 pair of hard slices ~4% of
// the GPU. Charged by the GPU time they report, with hard turns of at least
// 4 ms, the pair keeps the GPU busy at its shares in a few hundred turns,
// with the arbiter's charging rules too.
TEST(ComputePolicy, Issue19AHardPairChargedByGpuTimeKeepsTheGpuBusyAtItsShares) {
  for (bool arbiter : {false, true}) {
    QueueModel m({Slice(300), Slice(700)}, {1.0, 1.0});
    m.params.charge_blocking_holder = arbiter;
    m.params.charge_from_previous_report = arbiter;
    m.Run(10'000 * kMs);
    const uint64_t total = 10'000 * kMs;
    // Turns of 4-20 ms: a few hundred hand-overs in 10 s.
    EXPECT_LT(m.turns, 1500u) << arbiter;
    EXPECT_NEAR(m.Share(0, total), 0.30, 0.02) << arbiter;
    EXPECT_NEAR(m.Share(1, total), 0.70, 0.02) << arbiter;
    EXPECT_GT(m.Share(0, total) + m.Share(1, total), 0.99) << arbiter;
  }
}

// Issue 19 under the arbiter: a slice that reports no GPU time while it
// waits forever and uses every turn it gets (work in flight it does not
// report) is still charged for its turns: while another slice waits, a
// holder pays the wall time nobody's reports explain. What it keeps is the
// work it queued before its turn ended, which runs on into the next turn
// (the arbiter cannot see the GPU's queue: docs/COMPUTE.md, "what a liar
// can do"); without the blocking charge it would take half the GPU.
TEST(ComputePolicy, Issue19ASliceThatReportsNoGpuTimePaysForTheTurnsItBlocks) {
  for (bool blocking : {false, true}) {
    const QueueModel m = RunLiar(100, 900, blocking, false);
    const uint64_t total = kLiarRunNs;
    if (blocking) {
      // Measured 11.7%: its queue per turn, and up to the 1 ms the arbiter
      // lets reports lag (kUnexplainedSlackNs), on top of its 10% (charged
      // wall time in this model, such a slice took 11.0%).
      EXPECT_LT(m.Share(0, total), 0.14);
      EXPECT_GT(m.Share(1, total), 0.85);
    } else {
      EXPECT_GT(m.Share(0, total), 0.40) << "unchecked reports, shown to be exploitable";
    }
  }
}

// Issue 19 under the arbiter: where the others leave the GPU partly idle, a
// slice that reports no GPU time keeps nobody waiting for much of its turns
// and so is charged little: a hard 20% slice beside a hard 50% one took 57%
// here (43% of the simulated GPU in tests/security).
// Once the daemon's audit distrusts it (NVML saw it use more than it was
// charged; docs/SECURITY.md), it pays the wall time of every turn it holds,
// and is back at its share; the honest slice keeps its own throughout.
TEST(ComputePolicy, Issue19ADistrustedSliceIsChargedItsTurnsAndHeldToItsShare) {
  for (bool distrust : {false, true}) {
    const QueueModel m = RunLiar(200, 500, true, distrust);
    const uint64_t total = kLiarRunNs;
    if (distrust) {
      // Measured 24.1% / 50.4%: its share, and the 1 ms this model's liar
      // leaves queued at the end of each of its (4 ms) turns, which the
      // arbiter cannot see (as in the test above).
      EXPECT_LT(m.Share(0, total), 0.26);
      EXPECT_GT(m.Share(1, total), 0.49);
    } else {
      // Measured 56.7% / 42.7%.
      EXPECT_GT(m.Share(0, total), 0.40) << "the escape the audit closes, shown";
    }
  }
}

// Issue 19 under the arbiter: a holder's 10 ms kernel is reported when it
// completes, long after the check on unexplained time (1 ms of slack) has
// charged the holder for it. Its report pays that back instead of being
// charged again: a 30/70 pair of 10 ms kernels got 24/63% of the GPU when
// the kernel was charged twice.
TEST(ComputePolicy, Issue19AHolderThatReportsItsKernelLateIsChargedForItOnce) {
  PolicyParams p;
  p.charge_blocking_holder = true;
  p.charge_from_previous_report = true;
  SliceView s[2] = {Slice(500), Slice(500)};
  for (SliceView& v : s) {
    v.live = true;
    v.gpu_time = true;
    v.waiting = true;
  }
  TurnView turn;
  uint64_t now = kMs;
  Advance(now, 0, turn, s, p);  // Opens a turn.
  const int32_t h = turn.holder;
  ASSERT_GE(h, 0);
  const uint64_t before = s[h].charged_ns;
  s[h].waiting = false;
  s[h].inflight = true;
  for (int i = 0; i < 10; ++i) {  // 10 ms of a kernel nobody reports yet.
    const uint64_t last = now;
    now += kMs;
    Advance(now, last, turn, s, p);
  }
  EXPECT_EQ(turn.holder, h);
  const uint64_t last = now;
  now += 100'000;
  s[h].gpu_ns = 10 * kMs;  // It completed.
  s[h].inflight = false;
  Advance(now, last, turn, s, p);
  const uint64_t charged = s[h].charged_ns - before;
  EXPECT_GE(charged, 10 * kMs);
  EXPECT_LE(charged, 10 * kMs + 200'000) << "charged twice";
}

// Issue 19, weak spot 2 for loops that leave the GPU mostly idle: a 30/70
// pair of hard slices whose loops each keep the GPU busy a quarter of the
// time they run (short kernels, a synchronise after each, CPU work between)
// used a quarter of the GPU together with exclusive turns, where the same two
// loops reach half of it side by side. Co-running (PolicyParams::corun), the
// pair uses what both loops reach, each what it asks for.
TEST(ComputePolicy, Issue19APairOfLoopsThatLeaveTheGpuIdleCoRun) {
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
TEST(ComputePolicy, Issue19ACoRunningHardSliceIsHeldToItsShare) {
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
TEST(ComputePolicy, Issue19SlicesThatKeepTheGpuBusyDoNotCoRun) {
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

// Issue 19: under caps that hold the split (every slice hard, shares adding
// up to at most 100%), loops that leave gaps co-run even where their duties
// add up to more than kCoRunMaxDutyMilli: a 30/70 pair of loops that each
// keep the GPU busy 60% of the time they run used 0.6 of it in exclusive
// turns. The caps keep the split. Where they do not hold it (a
// work-conserving slice), the budget applies and the pair takes turns.
TEST(ComputePolicy, Issue19UnderCapsThatHoldTheSplitLoopsWithGapsCoRun) {
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
TEST(ComputePolicy, Issue19AHiddenCoRunnerDoesNotGetBusySlicesToHostIt) {
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

// Priority stays exclusive: a slice never co-runs beside a holder of another
// priority, and a high-priority slice with work takes the GPU from a
// co-running pair of normal ones at once (it gets all it asks for).
TEST(ComputePolicy, Issue19CoRunningStaysWithinOnePriority) {
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
TEST(ComputePolicy, Issue19OnlyTrustedReportsCoRun) {
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
TEST(ComputePolicy, Issue19ATurnEndingBesideACoRunnerGoesToItAtOnce) {
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
}  // namespace gpuslice::shim
