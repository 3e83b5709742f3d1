#include "daemon/shell/shell_jobs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "daemon/launch/launcher_fake.h"
#include "daemon/table/job_transitions_fake.h"

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::JobState;

// ShellJobs over a job table of its own and the fake launcher; the test
// process itself stands for the process a client started.
class ShellJobsTest : public ::testing::Test {
 protected:
  ShellJobsTest()
      : shells_(table_, launcher_, transitions_, {.watch_running = [this] { ++watches_; }}) {}

  // A running job of `uid` placed and waiting for its client (no pid yet).
  Job& Placed(uint64_t id, uint32_t uid, core::JobMode mode = core::JobMode::kShell) {
    Job job;
    job.id = id;
    job.uid = uid;
    job.user = "u" + std::to_string(uid);
    job.mode = mode;
    job.state = JobState::kRunning;
    table_.live()[id];
    return table_.jobs()[id] = job;
  }

  static Caller CallerOf(uint32_t uid, bool admin = false) {
    Caller caller;
    caller.uid = caller.gid = uid;
    caller.user = "u" + std::to_string(uid);
    caller.admin = admin;
    return caller;
  }

  JobTable table_;
  FakeLauncher launcher_;
  FakeTransitions transitions_;
  int watches_ = 0;
  ShellJobs shells_;
};

TEST_F(ShellJobsTest, AttachRefusesAJobThatIsNotAShell) {
  Placed(1, getuid(), core::JobMode::kSubmit);
  core::Status s = shells_.Attach(CallerOf(getuid(), true), 1, getpid());
  EXPECT_EQ(s.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("only shell jobs and run -i commands"), std::string::npos);
  EXPECT_EQ(table_.jobs()[1].pid, 0);
}

TEST_F(ShellJobsTest, AttachRefusesAProcessNotAChildOfTheCallingProcess) {
  Placed(1, getuid());
  // The caller's own process, but no child of the calling process (none is
  // known for this caller).
  core::Status s = shells_.Attach(CallerOf(getuid()), 1, getpid());
  EXPECT_EQ(s.code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("is not a child of the calling process"), std::string::npos)
      << s.message();
  EXPECT_EQ(table_.jobs()[1].pid, 0);
  EXPECT_TRUE(transitions_.persisted.empty());
}

TEST_F(ShellJobsTest, AttachRefusesAnotherUsersProcessAndOneThatDoesNotExist) {
  const uint32_t other = getuid() + 4242;
  Placed(1, other);
  core::Status s = shells_.Attach(CallerOf(other), 1, getpid());
  EXPECT_EQ(s.code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("is not yours"), std::string::npos) << s.message();
  EXPECT_EQ(shells_.Attach(CallerOf(other), 1, -5).code(), core::StatusCode::kInvalidArgument);
}

TEST_F(ShellJobsTest, ASecondAttachIsRefused) {
  Placed(1, getuid());
  ASSERT_TRUE(shells_.Attach(CallerOf(getuid(), /*admin=*/true), 1, getpid()).ok());
  EXPECT_EQ(table_.jobs()[1].pid, getpid());
  EXPECT_EQ(transitions_.PersistedIds(), std::vector<uint64_t>{1});
  core::Status again = shells_.Attach(CallerOf(getuid(), /*admin=*/true), 1, getpid());
  EXPECT_EQ(again.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.message().find("is not waiting for its client to start it"), std::string::npos);
  EXPECT_EQ(transitions_.persisted.size(), 1u);
}

TEST_F(ShellJobsTest, AReportedExitOfAJobThatEndedIsOk) {
  Job& job = Placed(1, 1000);
  table_.live().erase(1);
  job.state = JobState::kExited;
  EXPECT_TRUE(shells_.ReportExit(CallerOf(1000), 1, 3).ok());
  EXPECT_EQ(watches_, 0);
  EXPECT_EQ(transitions_.plans(), 0);
  EXPECT_EQ(shells_.ReportExit(CallerOf(1000), 9, 3).code(), core::StatusCode::kNotFound);
}

TEST_F(ShellJobsTest, AReportedExitEndsTheJobThroughTheWatchAndPlansTheQueue) {
  Placed(1, 1000);
  EXPECT_EQ(shells_.ReportExit(CallerOf(1001), 1, 3).code(), core::StatusCode::kPermissionDenied);
  ASSERT_TRUE(shells_.ReportExit(CallerOf(1000), 1, 3).ok());
  EXPECT_EQ(table_.live()[1].reported_exit, 3);
  EXPECT_EQ(watches_, 1);
  EXPECT_EQ(transitions_.plans(), 1);
  Placed(2, 1000, core::JobMode::kSubmit);
  EXPECT_EQ(shells_.ReportExit(CallerOf(1000), 2, 0).code(), core::StatusCode::kFailedPrecondition);
}

TEST_F(ShellJobsTest, AJobWhoseProcessesAreGoneWaitsForItsReportOnlyAWhile) {
  LiveState l;
  EXPECT_TRUE(shells_.AwaitExitReport(l, 10'000));
  EXPECT_EQ(l.group_gone_ms, 10'000);
  EXPECT_TRUE(shells_.AwaitExitReport(l, 10'000 + ShellJobs::kExitReportGraceMs - 1));
  EXPECT_FALSE(shells_.AwaitExitReport(l, 10'000 + ShellJobs::kExitReportGraceMs));
  LiveState reported;
  reported.reported_exit = 0;
  EXPECT_FALSE(shells_.AwaitExitReport(reported, 10'000));
}

}  // namespace
}  // namespace gpuslice::daemon
