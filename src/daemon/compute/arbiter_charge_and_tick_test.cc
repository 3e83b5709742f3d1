#include <gtest/gtest.h>
#include <unistd.h>

#include "daemon/compute/arbiter.h"
#include "daemon/compute/arbiter_test_fixture.h"
#include "slice/compute/coord.h"
#include "slice/compute/coord_board.h"
#include "slice/compute/coord_turns.h"

// The arbiter's charge of a process that missed its heartbeats, and its
// quiet tick.

namespace gpuslice::daemon {
namespace {

using arbiter_testing::ArbiterTest;
using arbiter_testing::kGpu;
using arbiter_testing::kMs;
using arbiter_testing::Limits;
using arbiter_testing::Write;
namespace bd = slice::board;

// A process whose heartbeat lapses (descheduled past
// kMemberTimeoutNs on an overloaded machine, not dead) is charged, when it
// beats again, only the GPU time it added since the last read. The arbiter
// used to forget its counter while it was not live and count all of it
// again (up to kMaxGpuStepNs): an honest 50% slice was charged a second it
// had paid for and waited two seconds for its turn.
TEST_F(ArbiterTest, AProcessThatMissedItsHeartbeatsIsNotChargedTwice) {
  Arbiter a(options_);
  ASSERT_TRUE(a.Register(Limits(1, 500)).ok());
  auto members = Members(a, 1);
  ASSERT_NE(members, nullptr);
  uint64_t now = slice::MonotonicNs();
  Write(*members, 0, bd::kMemberGpuTime | bd::kMemberInflight, now);
  members->slot(0).gpu_ns.store(400 * kMs);
  a.TickForTest(kGpu, now);
  const uint64_t first = a.ChargedNs(1).value_or(0);
  EXPECT_EQ(first, 400 * kMs) << "its first report";
  // No heartbeat for twice the timeout: not live.
  now += 2 * bd::kMemberTimeoutNs;
  a.TickForTest(kGpu, now);
  // Back, having used 10 ms more.
  now += kMs;
  Write(*members, 0, bd::kMemberGpuTime | bd::kMemberInflight, now);
  members->slot(0).gpu_ns.store(410 * kMs);
  a.TickForTest(kGpu, now);
  EXPECT_EQ(a.ChargedNs(1).value_or(0) - first, 10 * kMs) << "charged what it added, once";
  // A new process in the slot (another owner) is charged its whole counter.
  now += kMs;
  members->slot(0).owner.store((uint64_t{uint32_t(getpid()) + 1} << 32) | 1);
  members->slot(0).gpu_ns.store(5 * kMs);
  members->slot(0).heartbeat_ns.store(now);
  a.TickForTest(kGpu, now);
  EXPECT_EQ(a.ChargedNs(1).value_or(0) - first, 15 * kMs);
}

// While the open turn needs no decision (its holder alone, tokens
// to spare) the arbiter decides at the quiet tick, and the holder's
// processes (slice::BoardTurns::QuietNs) judge the turn quiet too; another
// slice with work, a distrusted holder or a cap close by bring the active
// tick back. A 20 us launch-then-synchronise loop alone reached 0.82-0.87 of
// its unshared speed with both ticking at 200 us.
TEST_F(ArbiterTest, AQuietTurnIsDecidedAtTheQuietTick) {
  Arbiter a(options_);
  ASSERT_TRUE(a.Register(Limits(1, 300)).ok());
  slice::BoardTurns turns(Board(a), Members(a, 1), 0, a.BoardPath(kGpu));
  uint64_t now = slice::MonotonicNs();
  ASSERT_TRUE(turns.Join(getpid(), now).ok());
  // The slice's process: waiting until its turn opens, then in flight, using
  // `duty` of the wall time.
  auto step = [&](uint64_t ns, double duty) {
    now += ns;
    const bool open = turns.HoldsOpenTurn(now);
    turns.Publish(bd::kMemberGpuTime | (open ? bd::kMemberInflight : bd::kMemberWaiting), now,
                  /*ring=*/false);
    turns.AddGpuNs(open ? uint64_t(double(ns) * duty) : 0);
    return a.TickForTest(kGpu, now);
  };
  uint64_t tick = 0;
  for (int i = 0; i < 100; ++i) tick = step(options_.active_tick_ns, 0.3);
  ASSERT_TRUE(turns.HoldsOpenTurn(now));
  EXPECT_EQ(tick, options_.quiet_tick_ns) << "alone, far from its cap";
  EXPECT_GE(turns.QuietNs(), 3 * kMs);

  // Another slice whose process waits for a turn.
  ASSERT_TRUE(a.Register(Limits(2, 300)).ok());
  auto other = Members(a, 2);
  Write(*other, 0, bd::kMemberGpuTime | bd::kMemberWaiting, now);
  tick = step(options_.active_tick_ns, 0.3);
  EXPECT_EQ(tick, options_.active_tick_ns) << "another slice waits";
  EXPECT_EQ(turns.QuietNs(), 0u);
  // Gone idle (nothing waiting or in flight): quiet again once the first
  // holds the turn.
  Write(*other, 0, bd::kMemberGpuTime, now);
  for (int i = 0; i < 200 && !turns.HoldsOpenTurn(now); ++i) step(options_.active_tick_ns, 0.3);
  for (int i = 0; i < 20; ++i) {
    Write(*other, 0, bd::kMemberGpuTime, now);
    tick = step(options_.active_tick_ns, 0.3);
  }
  ASSERT_TRUE(turns.HoldsOpenTurn(now));
  EXPECT_EQ(tick, options_.quiet_tick_ns) << "the other is idle";
  EXPECT_GE(turns.QuietNs(), 3 * kMs);
  a.Drop(2);

  // Using the GPU all the time, a 30% slice runs out of tokens: the active
  // tick before its cap, so the turn closes on time.
  bool closed_after_active = false;
  for (int i = 0; i < 2000 && turns.HoldsOpenTurn(now); ++i) {
    tick = step(options_.active_tick_ns, 1.0);
    closed_after_active = tick == options_.active_tick_ns;
  }
  EXPECT_FALSE(turns.HoldsOpenTurn(now)) << "the cap closed the turn";
  EXPECT_TRUE(closed_after_active);

  // A distrusted holder is never quiet.
  for (int i = 0; i < 2000 && !turns.HoldsOpenTurn(now); ++i) step(options_.active_tick_ns, 0.0);
  ASSERT_TRUE(turns.HoldsOpenTurn(now));
  a.DistrustReports(1);
  for (int i = 0; i < 10; ++i) tick = step(options_.active_tick_ns, 0.1);
  EXPECT_EQ(tick, options_.active_tick_ns);
}

}  // namespace
}  // namespace gpuslice::daemon
