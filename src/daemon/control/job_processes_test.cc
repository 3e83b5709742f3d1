#include "daemon/control/job_processes.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "daemon/launch/launcher_fake.h"

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::JobState;

// Pids far above any a test machine hands out.
constexpr int64_t kGroup = 3'800'000;    // The job's process group leader.
constexpr int64_t kEscaped = 3'800'001;  // The job's, outside its group.
constexpr int64_t kOther = 3'800'002;    // Another user's process.
constexpr uint32_t kUser = 1000;

class JobProcessesTest : public ::testing::Test {
 protected:
  JobProcessesTest()
      : external_(0,
                  {.for_each_running = [](const auto&) {},
                   .processes = [this]() -> ProcessTable& { return procs_; },
                   .finish = [](Job&, JobState, int, std::string) {}},
                  launcher_),
        control_(dir_, &procs_, table_, launcher_, regions_, usage_, external_, clock_,
                 {.slice_limits =
                      [](const Job& job) {
                        SliceLimits l;
                        l.job_id = job.id;
                        return l;
                      },
                  .record_event =
                      [this](std::string kind, uint64_t id, std::string, std::string message) {
                        events_.emplace_back(std::move(kind), id, std::move(message));
                      }}) {
    procs_.owners[kGroup] = {kUser, kUser, "alice", {}};
    procs_.owners[kEscaped] = {kUser, kUser, "alice", {}};
    procs_.owners[kOther] = {kUser + 1, kUser + 1, "bob", {}};
    procs_.groups[kGroup] = kGroup;
    procs_.groups[kEscaped] = kEscaped;
    procs_.groups[kOther] = kOther;
  }
  ~JobProcessesTest() override { (void)!system(("rm -rf " + dir_).c_str()); }

  // A running job of kUser in group kGroup, whose slice names `slots`.
  Job& Running(uint64_t id, std::vector<int32_t> slots = {}) {
    Job job;
    job.id = id;
    job.uid = kUser;
    job.user = "alice";
    job.state = JobState::kRunning;
    job.pid = kGroup;
    job.region_path = "/fake/slice-" + std::to_string(id);
    SliceLimits limits;
    limits.job_id = id;
    (void)regions_.Create(limits);
    regions_.pids[job.region_path] = std::move(slots);
    table_.live()[id];
    return table_.Add(job);
  }

  static std::string MakeDir() {
    char tmpl[] = "/tmp/job_processes_testXXXXXX";
    return mkdtemp(tmpl);
  }

  std::string dir_ = MakeDir();
  FakeProcessTable procs_;
  FakeLauncher launcher_;
  FakeRegionStore regions_;
  UsageBook usage_;
  JobTable table_;
  FakeClock clock_;
  ExternalJobs external_;
  std::vector<std::tuple<std::string, uint64_t, std::string>> events_;
  JobProcesses control_;
};

TEST_F(JobProcessesTest, AProcessIsItsGroupsJobAndASliceClaimCountsOnlyForTheJobsUser) {
  Running(7, /*slots=*/{static_cast<int32_t>(kEscaped), static_cast<int32_t>(kOther)});
  auto jobs = control_.JobsOf({kGroup, kEscaped, kOther, 3'800'099});
  EXPECT_EQ(jobs.at(kGroup), 7u);    // Its process group.
  EXPECT_EQ(jobs.at(kEscaped), 7u);  // Named by its slice, and the job user's.
  // Named by the slice too, but someone else's: a job cannot claim it.
  EXPECT_EQ(jobs.count(kOther), 0u);
  EXPECT_EQ(jobs.count(3'800'099), 0u);
}

TEST_F(JobProcessesTest, StopAndContinueReachTheGroupAndTheJobUsersProcessesOutsideIt) {
  Job& job = Running(7);
  JobUsage& u = usage_.Reset(7, clock_.NowMs(), 0);
  u.pids = {static_cast<int32_t>(kEscaped), static_cast<int32_t>(kOther)};
  control_.Stop(job);
  EXPECT_EQ(launcher_.stopped.count(kGroup), 1u);
  control_.Continue(job);
  EXPECT_EQ(launcher_.stopped.count(kGroup), 0u);
  std::vector<std::pair<int64_t, int>> want = {{kEscaped, SIGSTOP}, {kEscaped, SIGCONT}};
  EXPECT_EQ(procs_.signals, want);  // Never the other user's process.
}

TEST_F(JobProcessesTest, AKilledJobIsEndingAtOnceWithAnEventAndALineInItsLog) {
  Job& job = Running(7);
  ASSERT_EQ(mkdir((dir_ + "/7").c_str(), 0700), 0);
  { std::ofstream(dir_ + "/7/stderr") << "its own output\n"; }
  LiveState& live = table_.live().at(7);
  control_.Kill(job, live, "memory_exceeded", "used 5 GiB of its 4 GiB");
  ASSERT_TRUE(live.ending.has_value());
  EXPECT_EQ(*live.ending, JobState::kCancelled);
  EXPECT_EQ(live.ending_reason, "killed by the watchdog: used 5 GiB of its 4 GiB");
  EXPECT_GT(live.kill_at_ms, 0);
  ASSERT_FALSE(launcher_.signals.empty());
  EXPECT_EQ(launcher_.signals.back(), std::make_pair(kGroup, SIGKILL));
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(std::get<0>(events_[0]), "memory_exceeded");
  EXPECT_EQ(std::get<2>(events_[0]), "used 5 GiB of its 4 GiB; killed");
  std::stringstream log;
  log << std::ifstream(dir_ + "/7/stderr").rdbuf();
  EXPECT_EQ(log.str(),
            "its own output\ngpuslice: job 7 killed by the watchdog: used 5 GiB of its 4 GiB\n");
}

TEST_F(JobProcessesTest, AnExternalJobWithoutAHolderIsPausedNotKilled) {
  Job& job = Running(8);
  job.mode = core::JobMode::kExternal;
  job.pid = 0;
  LiveState& live = table_.live().at(8);
  control_.Kill(job, live, "memory_exceeded", "over its limit");
  EXPECT_FALSE(live.ending.has_value());
  EXPECT_TRUE(live.paused);
  ASSERT_FALSE(regions_.updates.empty());
  EXPECT_TRUE(regions_.updates.back().second.launches_paused);
  EXPECT_TRUE(launcher_.signals.empty());
  // Paused once: a second breach neither updates nor reports again.
  const size_t updates = regions_.updates.size();
  control_.Kill(job, live, "memory_exceeded", "over its limit");
  EXPECT_EQ(regions_.updates.size(), updates);
  EXPECT_EQ(events_.size(), 1u);
}

TEST_F(JobProcessesTest, ALineForAJobWhoseLogIsGoneIsDropped) {
  Job& job = Running(9);
  control_.AppendToStderr(job, "nobody reads this");  // No directory: nothing, no crash.
  struct stat st;
  EXPECT_NE(stat((dir_ + "/9/stderr").c_str(), &st), 0);
}

}  // namespace
}  // namespace gpuslice::daemon
