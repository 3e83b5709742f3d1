#include "daemon/waits/holds.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

TEST(JobHolds, AHeldJobIsHeldUntilReleased) {
  JobHolds holds;
  EXPECT_FALSE(holds.any());
  holds.Hold(7);
  holds.Hold(7);
  EXPECT_TRUE(holds.any());
  EXPECT_TRUE(holds.Holds(7));
  EXPECT_FALSE(holds.Holds(8));
  holds.Release(7);
  EXPECT_FALSE(holds.Holds(7));
  EXPECT_FALSE(holds.any()) << "holding twice is one hold";
  holds.Release(9);  // Never held: nothing to do.
  EXPECT_FALSE(holds.any());
}

TEST(JobHolds, TheWaitingTextSaysWhoReleasesTheHold) {
  core::Job job;
  job.id = 7;
  EXPECT_EQ(JobHolds::WaitingText(job), "");
  job.hold = core::HoldKind::kUser;
  EXPECT_EQ(JobHolds::WaitingText(job), "held (gpuslice release 7)");
  job.hold = core::HoldKind::kAdmin;
  EXPECT_EQ(JobHolds::WaitingText(job),
            "held by an admin (an admin releases it: gpuslice release 7)");
}

}  // namespace
}  // namespace gpuslice::daemon
