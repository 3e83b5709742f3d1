// External jobs bound to their caller (`bound_to_caller`: a Slurm step's
// slurmstepd asks for its slice): released when the holder is gone; their
// processes are the holder's descendants of the job's owner, which the
// daemon ends as it ends its own jobs; refusals say who holds the GPU.

#include <gtest/gtest.h>
#include <signal.h>

#include "daemon/jobs/test_support.h"

namespace gpuslice::daemon {
namespace {

using core::JobState;

constexpr int32_t kStepd = 4242;  // The holder: a root process.
constexpr uint64_t kStepdStart = 777;
constexpr uint32_t kUser = 1000;

class BoundJobTest : public ServiceFixture {
 protected:
  void SetUp() override {
    options_.processes = &procs_;
    options_.external_gid_base = 2'000'000'000;
    ServiceFixture::SetUp();
    launcher_.alive.insert(kStepd);
    procs_.owners[kStepd] = {0, 0, "root", {}};
  }
  Caller Stepd(uint32_t uid = kUser) {
    Caller c = TestCaller(uid);
    c.process = std::make_shared<FakePeerProcess>(PeerIdentity{kStepd, 0, kStepdStart});
    return c;
  }
  static SubmitSpec Bound(const std::string& mem, const std::string& gpu = "GPU-0") {
    SubmitSpec s;
    s.mode = core::JobMode::kExternal;
    s.fields.mem = mem;
    s.gpu_uuids = {gpu};
    s.bound_to_caller = true;
    s.labels = {{"slurm_job", "77"}, {"slurm_step", "0"}};
    return s;
  }
  // A task of the step (the owner's) and its child, and a root helper of
  // slurmstepd's that is not the job's to signal.
  void StartTasks() {
    procs_.parents[5001] = kStepd;
    procs_.parents[5002] = 5001;
    procs_.parents[6000] = kStepd;
    procs_.owners[5001] = {kUser, kUser, "u1000", {}};
    procs_.owners[5002] = {kUser, kUser, "u1000", {}};
    procs_.owners[6000] = {0, 0, "root", {}};
  }
  void EndTasks() {
    for (int64_t pid : {5001, 5002, 6000}) {
      procs_.parents.erase(pid);
      procs_.owners.erase(pid);
    }
  }
  std::set<int64_t> Signalled(int signal) const {
    std::set<int64_t> out;
    for (const auto& [pid, sig] : procs_.signals) {
      if (sig == signal) out.insert(pid);
    }
    return out;
  }
  FakeProcessTable procs_;
};

TEST_F(BoundJobTest, IsReleasedWithinATickOfItsHolderEnding) {
  auto v = service_->intake().Submit(Stepd(), Bound("4GiB"));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->job.holder_pid, kStepd);
  EXPECT_EQ(v->job.pid, 0);  // Never the job's own process group.
  service_->Tick();
  EXPECT_EQ(State(v->job.id), JobState::kRunning);
  launcher_.alive.erase(kStepd);  // scancel, a time limit, a crash: all alike.
  service_->Tick();
  JobView after = Get(v->job.id);
  EXPECT_EQ(after.job.state, JobState::kExited);
  EXPECT_EQ(after.job.exit_code, 0);
  EXPECT_NE(after.job.reason.find("pid 4242"), std::string::npos) << after.job.reason;
  EXPECT_TRUE(procs_.signals.empty());  // Nothing signalled: it just ended.
  EXPECT_TRUE(service_->intake().Submit(Stepd(), Bound("80GiB")).ok());  // The GPU is free.
}

TEST_F(BoundJobTest, NeedsACallerProcessAndIsTheCallersOwn) {
  Caller no_pid = TestCaller(kUser);
  auto v = service_->intake().Submit(no_pid, Bound("4GiB"));
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("bound_to_caller"), std::string::npos);
  // Nothing held: the whole GPU is still there.
  EXPECT_TRUE(service_->intake().Submit(Stepd(), Bound("80GiB")).ok());
}

TEST_F(BoundJobTest, SurvivesARestartAndIsReleasedAfterItIfItsHolderIsGone) {
  auto v = service_->intake().Submit(Stepd(), Bound("4GiB"));
  ASSERT_TRUE(v.ok());
  Restart();
  service_->Tick();
  EXPECT_EQ(State(v->job.id), JobState::kRunning);
  EXPECT_EQ(Get(v->job.id).job.holder_pid, kStepd);
  launcher_.alive.erase(kStepd);  // The node restarted: slurmstepd is gone.
  Restart();
  service_->Tick();
  EXPECT_EQ(State(v->job.id), JobState::kExited);
}

TEST_F(BoundJobTest, CancelEndsItsRunningProcessesThenReleases) {
  auto v = service_->intake().Submit(Stepd(), Bound("4GiB"));
  ASSERT_TRUE(v.ok());
  StartTasks();
  ASSERT_TRUE(service_->Cancel(TestCaller(0, true), v->job.id).ok());
  // The owner's processes below the holder get SIGTERM; never the holder
  // (slurmstepd) nor a process of another user under it.
  EXPECT_EQ(Signalled(SIGTERM), (std::set<int64_t>{5001, 5002}));
  service_->Tick();
  EXPECT_EQ(State(v->job.id), JobState::kRunning);  // Until they are gone.
  clock_.Advance(1500);
  service_->Tick();
  EXPECT_EQ(Signalled(SIGKILL), (std::set<int64_t>{5001, 5002}));
  EndTasks();
  service_->Tick();
  JobView after = Get(v->job.id);
  EXPECT_EQ(after.job.state, JobState::kCancelled);
  EXPECT_NE(after.job.reason.find("cancelled by"), std::string::npos);
}

TEST_F(BoundJobTest, ReleasedByItsPluginWhenNothingRunsAnyMore) {
  auto v = service_->intake().Submit(Stepd(), Bound("4GiB"));
  ASSERT_TRUE(v.ok());
  // slurm_spank_exit: the tasks have ended; slurmstepd (root) releases it.
  ASSERT_TRUE(service_->Cancel(TestCaller(0, true), v->job.id).ok());
  EXPECT_EQ(State(v->job.id), JobState::kExited);
  EXPECT_TRUE(procs_.signals.empty());
}

TEST_F(BoundJobTest, MaximumRunTimeEndsItsProcesses) {
  SubmitSpec s = Bound("4GiB");
  s.fields.max_runtime = "10s";
  auto v = service_->intake().Submit(Stepd(), s);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  StartTasks();
  clock_.Advance(11'000);
  service_->Tick();
  EXPECT_EQ(Signalled(SIGTERM), (std::set<int64_t>{5001, 5002}));
  EndTasks();
  service_->Tick();
  EXPECT_EQ(State(v->job.id), JobState::kTimedOut);
}

TEST_F(BoundJobTest, AUsersSliceIsTheirsAndRootsGetsTheSliceGroup) {
  auto mine = service_->intake().Submit(Stepd(), Bound("4GiB"));
  ASSERT_TRUE(mine.ok());
  // The step's tasks run as the user, who owns the files as for any job.
  EXPECT_EQ(regions_.regions[mine->job.region_path].shared_gid, 0u);
  EXPECT_EQ(regions_.regions[mine->job.region_path].uid, kUser);
  // Root's external slices (the device plugin's) keep their group.
  auto roots = service_->intake().Submit(Stepd(0), Bound("4GiB"));
  ASSERT_TRUE(roots.ok());
  EXPECT_NE(regions_.regions[roots->job.region_path].shared_gid, 0u);
}

TEST_F(BoundJobTest, TheFenceSaysWhoHoldsTheGpu) {
  SubmitSpec whole;
  whole.mode = core::JobMode::kExternal;
  whole.fields.gpus = "1";
  whole.gpu_uuids = {"GPU-0"};
  whole.bound_to_caller = true;
  whole.labels = {{"slurm_job", "12"}};
  auto w = service_->intake().Submit(Stepd(), whole);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto shard = service_->intake().Submit(Stepd(1001), Bound("1GiB"));
  ASSERT_FALSE(shard.ok());
  const std::string why = shard.status().message();
  EXPECT_NE(why.find("GPU-0 is held whole by job " + std::to_string(w->job.id) +
                     " (u1000, Slurm job 12): a slice cannot share it"),
            std::string::npos)
      << why;
  // And the reverse: slices on GPU-1 keep a whole-GPU step off it.
  auto s = service_->intake().Submit(Stepd(1001), Bound("1GiB", "GPU-1"));
  ASSERT_TRUE(s.ok());
  whole.gpu_uuids = {"GPU-1"};
  auto refused = service_->intake().Submit(Stepd(), whole);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("GPU-1 is shared by the slices of job " +
                                            std::to_string(s->job.id) +
                                            " (u1001, Slurm job 77): a whole-GPU request "
                                            "cannot have it"),
            std::string::npos)
      << refused.status().message();
}

// slurm_only: users get slices only through slurmstepd (a process whose
// real uid is root acting for them); their own processes cannot.
TEST_F(BoundJobTest, SlurmOnlyLetsUsersInThroughSlurmstepdAlone) {
  options_.slurm_only = true;
  Restart();
  EXPECT_TRUE(service_->intake().Submit(Stepd(), Bound("4GiB")).ok());  // slurmstepd: real uid 0.
  StartTasks();
  Caller own = TestCaller(kUser);
  // The user's own process (real uid 1000) asking directly.
  own.process = std::make_shared<FakePeerProcess>(PeerIdentity{5001, kUser, 1});
  auto direct = service_->intake().Submit(own, Bound("4GiB", "GPU-1"));
  ASSERT_FALSE(direct.ok());
  EXPECT_EQ(direct.status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(direct.status().message().find("slurm_only"), std::string::npos);
  SubmitSpec run;
  run.fields.mem = "1GiB";
  run.argv = {"true"};
  run.cwd = "/tmp";
  EXPECT_EQ(service_->intake().Submit(Stepd(), run).status().code(),
            core::StatusCode::kPermissionDenied);
  SubmitSpec unbound = Bound("1GiB", "GPU-1");
  unbound.bound_to_caller = false;
  EXPECT_FALSE(service_->intake().Submit(Stepd(), unbound).ok());
  // Admins (the Kubernetes plugin, root) are not held.
  EXPECT_TRUE(service_->intake().Submit(TestCaller(0, true), run).ok());
}

// slurm_only must not ask who owns the caller's pid when the request is
// handled: a user's connection whose process has ended, its pid taken by a
// root process, would pass as slurmstepd.
TEST_F(BoundJobTest, SlurmOnlyJudgesTheProcessThatConnectedNotWhoHoldsItsPidNow) {
  options_.slurm_only = true;
  Restart();
  // The user's process (real uid 1000) connected as pid 5001; pid 5001 is
  // root's now.
  procs_.owners[5001] = {0, 0, "root", {}};
  launcher_.alive.insert(5001);
  Caller user = TestCaller(kUser);
  user.process = std::make_shared<FakePeerProcess>(PeerIdentity{5001, kUser, 1});
  auto v = service_->intake().Submit(user, Bound("4GiB"));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(v.status().message().find("slurm_only"), std::string::npos) << v.status().message();
  EXPECT_TRUE(service_->reads().List(true).empty());
}

TEST_F(BoundJobTest, ARequestOfAHolderThatHasEndedIsRefusedAndHoldsNothing) {
  for (bool slurm_only : {false, true}) {
    SCOPED_TRACE(slurm_only ? "slurm_only" : "any node");
    options_.slurm_only = slurm_only;
    Restart();
    Caller stepd = Stepd();
    auto process = std::make_shared<FakePeerProcess>(PeerIdentity{kStepd, 0, kStepdStart});
    process->ended = true;
    stepd.process = process;
    auto v = service_->intake().Submit(stepd, Bound("4GiB"));
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), core::StatusCode::kPermissionDenied);
    EXPECT_NE(v.status().message().find("(pid 4242) has ended"), std::string::npos)
        << v.status().message();
    EXPECT_TRUE(service_->reads().List(true).empty());
  }
  // Its room was not kept: a running holder gets the whole GPU.
  EXPECT_TRUE(service_->intake().Submit(Stepd(), Bound("80GiB")).ok());
}

TEST_F(BoundJobTest, TheHolderIsTheProcessAsReadWhenItConnected) {
  auto v = service_->intake().Submit(Stepd(), Bound("4GiB"));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->job.holder_pid, kStepd);
  EXPECT_EQ(v->job.holder_start_time, kStepdStart);
  Caller remote = TestCaller(kUser);
  remote.process = nullptr;  // Its pid is not visible here.
  auto refused = service_->intake().Submit(remote, Bound("4GiB", "GPU-1"));
  EXPECT_EQ(refused.status().code(), core::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpuslice::daemon
