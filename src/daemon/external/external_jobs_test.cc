#include "daemon/external/external_jobs.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <functional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "daemon/launch/launcher_fake.h"

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::JobState;
using core::Status;

// Pids far above any a test machine hands out, so that /proc (read to tell
// a zombie) has none of them.
constexpr int64_t kHolder = 3'900'000;
constexpr int64_t kTask = 3'900'001;
constexpr int64_t kTaskChild = 3'900'002;
constexpr int64_t kRootHelper = 3'900'003;
constexpr uint32_t kUser = 1000;
constexpr uint32_t kGidBase = 2'000'000'000;

// The job table as the component sees it: running jobs, the process table,
// and the jobs it finished.
class ExternalJobsTest : public ::testing::Test {
 protected:
  ExternalJobs Make(uint32_t gid_base = kGidBase) {
    ExternalJobs::Jobs j;
    j.for_each_running = [this](const std::function<void(const Job&)>& visit) {
      for (const Job& job : running_) visit(job);
    };
    j.processes = [this]() -> ProcessTable& { return procs_; };
    j.finish = [this](Job& job, JobState state, int exit_code, std::string reason) {
      finished_.emplace_back(job.id, state, exit_code, std::move(reason));
    };
    return ExternalJobs(gid_base, j, launcher_);
  }
  static Job External(uint64_t id, uint32_t uid) {
    Job job;
    job.id = id;
    job.mode = core::JobMode::kExternal;
    job.state = JobState::kRunning;
    job.uid = job.gid = uid;
    job.user = uid == 0 ? "root" : "u" + std::to_string(uid);
    return job;
  }
  // A Slurm step's slice: held by slurmstepd (root), its tasks the user's.
  Job Bound(uint64_t id) {
    Job job = External(id, kUser);
    job.holder_pid = kHolder;
    job.holder_start_time = 777;
    launcher_.alive.insert(kHolder);
    procs_.owners[kHolder] = {0, 0, "root", {}};
    return job;
  }
  void StartTasks() {
    procs_.parents[kTask] = kHolder;
    procs_.parents[kTaskChild] = kTask;
    procs_.parents[kRootHelper] = kHolder;
    procs_.owners[kTask] = {kUser, kUser, "u1000", {}};
    procs_.owners[kTaskChild] = {kUser, kUser, "u1000", {}};
    procs_.owners[kRootHelper] = {0, 0, "root", {}};
  }
  void EndTasks() {
    for (int64_t pid : {kTask, kTaskChild, kRootHelper}) {
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
  static core::RequestFields Mem(const std::string& mem) {
    core::RequestFields f;
    f.mem = mem;
    return f;
  }

  FakeLauncher launcher_;
  FakeProcessTable procs_;
  std::vector<Job> running_;
  std::vector<std::tuple<uint64_t, JobState, int, std::string>> finished_;
};

TEST_F(ExternalJobsTest, AFractionOrAFixedNumberOfWholeGpusIsARequest) {
  ExternalJobs external = Make();
  auto fraction = external.CheckRequest(Mem("8GiB"));
  ASSERT_TRUE(fraction.ok()) << fraction.status().ToString();
  EXPECT_EQ(fraction->memory_bytes, 8 * core::kGiB);
  core::RequestFields whole;
  whole.gpus = "2";
  auto gpus = external.CheckRequest(whole);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(gpus->gpus_min, 2u);
}

TEST_F(ExternalJobsTest, HostCpusOrMemoryAreRefusedForWantOfACgroup) {
  ExternalJobs external = Make();
  core::RequestFields cpus = Mem("8GiB");
  cpus.cpus = "1";
  core::RequestFields host_mem = Mem("8GiB");
  host_mem.host_mem = "64MiB";
  for (const core::RequestFields& f : {cpus, host_mem}) {
    auto r = external.CheckRequest(f);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("cpus and host_mem"), std::string::npos)
        << r.status().message();
  }
}

TEST_F(ExternalJobsTest, ARangeOfWholeGpusIsRefused) {
  core::RequestFields f;
  f.gpus = "1-4";
  auto r = Make().CheckRequest(f);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("fixed number of GPUs"), std::string::npos)
      << r.status().message();
}

TEST_F(ExternalJobsTest, AMalformedRequestIsRefusedAsAnyJobsIs) {
  auto r = Make().CheckRequest(Mem("lots"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("--mem"), std::string::npos) << r.status().message();
}

TEST_F(ExternalJobsTest, OnlyRootsExternalJobsGetASliceGroupCycledByJobId) {
  ExternalJobs external = Make();
  EXPECT_EQ(external.SharedGidOf(External(7, 0)), kGidBase + 7);
  EXPECT_EQ(external.SharedGidOf(External(ExternalJobs::kGids + 7, 0)), kGidBase + 7);
  EXPECT_EQ(external.SharedGidOf(External(7, kUser)), 0u);  // A Slurm step: the user's files.
  Job launched = External(7, 0);
  launched.mode = core::JobMode::kSubmit;
  EXPECT_EQ(external.SharedGidOf(launched), 0u);
  EXPECT_EQ(Make(0).SharedGidOf(External(7, 0)), 0u);  // The admin turned groups off.
}

TEST_F(ExternalJobsTest, BindingTakesTheCallersPinnedProcessAsTheHolder) {
  FakePeerProcess stepd(PeerIdentity{static_cast<int32_t>(kHolder), 0, 777});
  Job job = External(3, kUser);
  ASSERT_TRUE(Make().BindToCaller(true, &stepd, &job).ok());
  EXPECT_EQ(job.holder_pid, kHolder);
  EXPECT_EQ(job.holder_start_time, 777u);
}

TEST_F(ExternalJobsTest, BindingNeedsALocalCallerWhoseProcessIsSeen) {
  FakePeerProcess stepd(PeerIdentity{static_cast<int32_t>(kHolder), 0, 777});
  Job job = External(3, kUser);
  for (auto [local, process] :
       std::vector<std::pair<bool, const PeerProcess*>>{{false, &stepd}, {true, nullptr}}) {
    Status s = Make().BindToCaller(local, process, &job);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("bound_to_caller"), std::string::npos) << s.message();
    EXPECT_EQ(job.holder_pid, 0);
  }
}

TEST_F(ExternalJobsTest, BindingToAProcessThatEndedIsRefused) {
  FakePeerProcess stepd(PeerIdentity{static_cast<int32_t>(kHolder), 0, 777});
  stepd.ended = true;
  Job job = External(3, kUser);
  Status s = Make().BindToCaller(true, &stepd, &job);
  EXPECT_EQ(s.code(), core::StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_EQ(job.holder_pid, 0);
}

TEST_F(ExternalJobsTest, HoldersOfNamesWholeAndSharedHoldersWithTheirSlurmJobs) {
  Job whole = External(4, kUser);
  whole.request.kind = core::RequestKind::kWholeGpus;
  whole.allocation.gpu_uuids = {"GPU-0"};
  whole.labels = {{"slurm_job", "12"}};
  Job a = External(5, kUser), b = External(6, 2000);
  a.request.kind = b.request.kind = core::RequestKind::kFraction;
  a.allocation.gpu_uuids = b.allocation.gpu_uuids = {"GPU-1"};
  running_ = {whole, a, b};
  ExternalJobs external = Make();
  EXPECT_EQ(external.HoldersOf({"GPU-0"}, core::RequestKind::kFraction),
            "; GPU-0 is held whole by job 4 (u1000, Slurm job 12): a slice cannot share it");
  EXPECT_EQ(external.HoldersOf({"GPU-1"}, core::RequestKind::kWholeGpus),
            "; GPU-1 is shared by the slices of jobs 5 (u1000), 6 (u2000): a whole-GPU request "
            "cannot have it");
  EXPECT_EQ(external.HoldersOf({"GPU-1"}, core::RequestKind::kFraction),
            "; GPU-1 is shared by the slices of jobs 5 (u1000), 6 (u2000)");
  EXPECT_EQ(external.HoldersOf({"GPU-2"}, core::RequestKind::kFraction), "");
}

TEST_F(ExternalJobsTest, HeldProcessesAreTheOwnersProcessesBelowALiveHolder) {
  Job job = Bound(3);
  StartTasks();
  ExternalJobs external = Make();
  EXPECT_TRUE(external.HolderAlive(job));
  std::vector<int64_t> held = external.HeldProcesses(job);
  EXPECT_EQ(std::set<int64_t>(held.begin(), held.end()), (std::set<int64_t>{kTask, kTaskChild}));
  // The holder gone: nothing is the job's any more.
  launcher_.alive.erase(kHolder);
  EXPECT_FALSE(external.HolderAlive(job));
  EXPECT_TRUE(external.HeldProcesses(job).empty());
}

TEST_F(ExternalJobsTest, AnUnboundJobHasNoHolderAndNoProcesses) {
  ExternalJobs external = Make();
  Job pod = External(3, 0);
  EXPECT_FALSE(external.HolderAlive(pod));
  EXPECT_TRUE(external.HeldProcesses(pod).empty());
}

TEST_F(ExternalJobsTest, SignalsReachOnlyTheHeldProcessesNeverTheHolderOrRootsHelpers) {
  Job job = Bound(3);
  StartTasks();
  Make().SignalHeld(job, SIGSTOP);
  EXPECT_EQ(Signalled(SIGSTOP), (std::set<int64_t>{kTask, kTaskChild}));
}

TEST_F(ExternalJobsTest, AJobWhoseHolderIsGoneIsReleasedAsExited) {
  Job job = Bound(3);
  launcher_.alive.erase(kHolder);
  int64_t kill_at = 0;
  EXPECT_TRUE(Make().Watch(job, std::nullopt, "", &kill_at, 1000));
  ASSERT_EQ(finished_.size(), 1u);
  EXPECT_EQ(std::get<1>(finished_[0]), JobState::kExited);
  EXPECT_EQ(std::get<2>(finished_[0]), 0);
  EXPECT_NE(std::get<3>(finished_[0]).find("pid 3900000) ended"), std::string::npos)
      << std::get<3>(finished_[0]);
}

TEST_F(ExternalJobsTest, AJobBeingEndedWhoseHolderIsGoneEndsAsTheDaemonSaid) {
  Job job = Bound(3);
  launcher_.alive.erase(kHolder);
  int64_t kill_at = 5000;
  EXPECT_TRUE(Make().Watch(job, JobState::kTimedOut, "ran past", &kill_at, 1000));
  ASSERT_EQ(finished_.size(), 1u);
  EXPECT_EQ(finished_[0],
            std::make_tuple(uint64_t{3}, JobState::kTimedOut, -1, std::string("ran past")));
}

TEST_F(ExternalJobsTest, AJobBeingEndedGetsItsGraceThenItsProcessesAreKilledThenItEnds) {
  Job job = Bound(3);
  StartTasks();
  ExternalJobs external = Make();
  int64_t kill_at = 5000;
  // Within the grace: nothing killed, it waits for its processes.
  EXPECT_FALSE(external.Watch(job, JobState::kCancelled, "cancelled by admin", &kill_at, 1000));
  EXPECT_TRUE(Signalled(SIGKILL).empty());
  EXPECT_TRUE(finished_.empty());
  // The grace is over: its processes get SIGKILL once.
  EXPECT_FALSE(external.Watch(job, JobState::kCancelled, "cancelled by admin", &kill_at, 5000));
  EXPECT_EQ(Signalled(SIGKILL), (std::set<int64_t>{kTask, kTaskChild}));
  EXPECT_EQ(kill_at, INT64_MAX);
  EXPECT_TRUE(finished_.empty());
  // They are gone: the slice goes, though the holder lives on.
  EndTasks();
  EXPECT_TRUE(external.Watch(job, JobState::kCancelled, "cancelled by admin", &kill_at, 6000));
  ASSERT_EQ(finished_.size(), 1u);
  EXPECT_EQ(std::get<1>(finished_[0]), JobState::kCancelled);
  EXPECT_EQ(std::get<3>(finished_[0]), "cancelled by admin");
}

TEST_F(ExternalJobsTest, AnUnboundJobRunsUntilTheDaemonEndsItThenEndsAtOnce) {
  Job pod = External(3, 0);
  ExternalJobs external = Make();
  int64_t kill_at = 5000;
  EXPECT_FALSE(external.Watch(pod, std::nullopt, "", &kill_at, 1000));
  EXPECT_TRUE(finished_.empty());
  EXPECT_TRUE(external.Watch(pod, JobState::kTimedOut, "ran past", &kill_at, 1000));
  ASSERT_EQ(finished_.size(), 1u);
  EXPECT_EQ(std::get<1>(finished_[0]), JobState::kTimedOut);
}

}  // namespace
}  // namespace gpuslice::daemon
