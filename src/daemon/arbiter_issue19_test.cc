#include <gtest/gtest.h>
#include <unistd.h>

#include "daemon/arbiter.h"
#include "daemon/arbiter_test_fixture.h"
#include "shim/coord.h"
#include "shim/coord_board.h"

// Issue 19 in the arbiter: what it charges a process that missed its
// heartbeats.

namespace gpuslice::daemon {
namespace {

using arbiter_testing::ArbiterTest;
using arbiter_testing::kGpu;
using arbiter_testing::kMs;
using arbiter_testing::Limits;
using arbiter_testing::Write;
namespace bd = shim::board;

// Issue 19: a process whose heartbeat lapses (descheduled past
// kMemberTimeoutNs on an overloaded machine, not dead) is charged, when it
// beats again, only the GPU time it added since the last read. The arbiter
// used to forget its counter while it was not live and count all of it
// again (up to kMaxGpuStepNs): an honest 50% slice was charged a second it
// had paid for and waited two seconds for its turn.
TEST_F(ArbiterTest, Issue19AProcessThatMissedItsHeartbeatsIsNotChargedTwice) {
  Arbiter a(options_);
  ASSERT_TRUE(a.Register(Limits(1, 500)).ok());
  auto members = Members(a, 1);
  ASSERT_NE(members, nullptr);
  uint64_t now = shim::MonotonicNs();
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

}  // namespace
}  // namespace gpuslice::daemon
