#include "daemon/suspend/suspender.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "core/units.h"
#include "daemon/launch/checkpointer_fake.h"

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::JobState;

SuspendCause By(std::string by) {
  SuspendCause cause;
  cause.by = std::move(by);
  return cause;
}

struct Event {
  std::string kind;
  uint64_t job_id = 0;
  std::string message;
};

// A Suspender over a job table of its own (a map), two A100s in one pool
// and a third of another model, and the fakes of the driver, the slices and
// the processes: what Service gives it, without Service.
class SuspenderTest : public ::testing::Test {
 protected:
  SuspenderTest() {
    for (uint32_t i = 0; i < 3; ++i) {
      GpuInfo g;
      g.index = i;
      g.uuid = "GPU-" + std::to_string(i);
      g.model = i < 2 ? "A100" : "H100";
      g.memory_total = 40 * core::kGiB;
      inventory_.gpus.push_back(g);
    }
    auto capacity = NodeCapacity::Create(inventory_.gpus, core::Policy::kBinpack);
    capacity_ = std::move(*capacity);
    checkpointer_ = std::make_shared<FakeCheckpointer>();
    suspender_ = std::make_unique<Suspender>(Hooks(), clock_, regions_, checkpointer_, 1000);
  }

  Suspender::Jobs Hooks() {
    return Suspender::Jobs{
        .live = [this](uint64_t id) -> Job* {
          auto it = jobs_.find(id);
          return it == jobs_.end() ? nullptr : &it->second;
        },
        .ending = [this](uint64_t id) { return ending_.count(id) > 0; },
        .stopped = [this](uint64_t id) { return stopped_.count(id) > 0; },
        .change_state =
            [this](Job& job, JobState to, std::string kind, std::string message) {
              job.state = to;
              events_.push_back({std::move(kind), job.id, std::move(message)});
              return true;
            },
        .persist = [this](const Job&) { ++persisted_; },
        .record_event =
            [this](std::string kind, uint64_t id, std::string, std::string message) {
              events_.push_back({std::move(kind), id, std::move(message)});
            },
        .limits_of =
            [](const Job& job) {
              SliceLimits limits;
              limits.job_id = job.id;
              limits.uuids = job.allocation.gpu_uuids;
              limits.launches_paused = job.state == JobState::kSuspended;
              return limits;
            },
        .capacity = [this] { return capacity_.get(); },
        .degraded_reason = [] { return std::string(); },
        .inventory = [this]() -> const InventorySnapshot& { return inventory_; },
        .pool_of = [this](uint32_t) -> const std::string& { return pool_; },
        .usage = [this](uint64_t id) -> const JobUsage* {
          auto it = usage_.find(id);
          return it == usage_.end() ? nullptr : &it->second;
        },
        .forget_usage = [this](uint64_t id) { usage_.erase(id); },
        .processes = [this]() -> ProcessTable& { return procs_; },
        .append_to_stderr = [this](const Job&,
                                   const std::string& line) { stderr_.push_back(line); },
        .suspend_failed = [this](Job& job, const SuspendCause&) { failed_.insert(job.id); },
        .resumed = [this](uint64_t id) { resumed_.insert(id); },
        .resume_on_demand = [this] { return resume_on_demand_; },
        .suspended =
            [this] {
              std::vector<Job*> out;
              for (auto& [id, job] : jobs_) {
                if (job.state == JobState::kSuspended) out.push_back(&job);
              }
              return out;
            },
        .enqueue = [this](const Job& job, int64_t) { queue_.insert(job.id); },
        .dequeue = [this](uint64_t id) { queue_.erase(id); },
        .may_resume = [this](const Job& job) { return !held_back_.count(job.id); },
        .request_schedule = [this] { ++schedules_; },
    };
  }

  // A running job of alice's on one whole GPU, with CUDA process `pid`.
  Job& Running(uint64_t id, uint32_t gpu, int64_t pid) {
    Job job;
    job.id = id;
    job.uid = 1000;
    job.user = "alice";
    job.state = JobState::kRunning;
    job.request.kind = core::RequestKind::kWholeGpus;
    job.request.gpus_min = job.request.gpus_max = 1;
    EXPECT_TRUE(capacity_->SetDemand(id, job.request).ok());
    EXPECT_TRUE(capacity_->PlaceOn(id, {"GPU-" + std::to_string(gpu)}).ok());
    job.allocation = *capacity_->AllocationOf(id);
    SliceLimits limits;
    limits.job_id = id;
    limits.uuids = job.allocation.gpu_uuids;
    job.region_path = *regions_.Create(limits);
    regions_.pids[job.region_path] = {static_cast<int32_t>(pid)};
    procs_.owners[pid] = ProcessOwner{1000, 1000, "alice", {}};
    checkpointer_->Set(pid, GpuProcessState::kRunning);
    return jobs_[id] = job;
  }

  // Applies the workers' outcomes until job `id`'s is done.
  void WaitFor(uint64_t id) {
    for (int i = 0; i < 5000 && suspender_->Busy(id); ++i) {
      suspender_->Finish();
      if (suspender_->Busy(id)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_FALSE(suspender_->Busy(id));
  }

  bool HasEvent(const std::string& kind, uint64_t id) const {
    for (const Event& e : events_) {
      if (e.kind == kind && e.job_id == id) return true;
    }
    return false;
  }
  std::string MessageOf(const std::string& kind) const {
    for (const Event& e : events_) {
      if (e.kind == kind) return e.message;
    }
    return "";
  }

  FakeClock clock_;
  FakeRegionStore regions_;
  FakeProcessTable procs_;
  InventorySnapshot inventory_;
  std::string pool_ = "default";
  std::unique_ptr<NodeCapacity> capacity_;
  std::shared_ptr<FakeCheckpointer> checkpointer_;
  std::map<uint64_t, Job> jobs_;
  std::map<uint64_t, JobUsage> usage_;
  std::set<uint64_t> ending_, stopped_, failed_, resumed_, queue_, held_back_;
  bool resume_on_demand_ = true;
  std::vector<Event> events_;
  std::vector<std::string> stderr_;
  int persisted_ = 0;
  int schedules_ = 0;
  std::unique_ptr<Suspender> suspender_;
};

TEST_F(SuspenderTest, ASuspendedJobGivesItsGpuBackOnlyOnceItsWorkerIsDone) {
  Job& job = Running(1, 0, 5001);
  SuspendCause cause;
  cause.by = "alice";
  ASSERT_TRUE(suspender_->Suspend(job, cause).ok());
  EXPECT_TRUE(suspender_->Busy(1));
  EXPECT_EQ(suspender_->Flags(1), std::vector<std::string>{"suspending"});
  WaitFor(1);
  EXPECT_EQ(job.state, JobState::kSuspended);
  EXPECT_EQ(checkpointer_->Get(5001), GpuProcessState::kCheckpointed);
  EXPECT_FALSE(capacity_->AllocationOf(1).has_value());
  EXPECT_TRUE(regions_.regions[job.region_path].launches_paused);
  EXPECT_TRUE(HasEvent("suspended", 1));
  EXPECT_EQ(job.suspended_since_ms, clock_.NowMs());
  EXPECT_FALSE(job.resume_when_fits);  // Asked by its owner: resumed by hand.
  EXPECT_GT(schedules_, 0);
}

TEST_F(SuspenderTest, ASecondSuspensionIsRefusedWhileTheFirstRuns) {
  Job& job = Running(1, 0, 5001);
  ASSERT_TRUE(suspender_->Suspend(job, By("alice")).ok());
  core::Status again = suspender_->Suspend(job, By("alice"));
  EXPECT_EQ(again.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.message().find("being suspended already"), std::string::npos) << again.message();
  WaitFor(1);
}

TEST_F(SuspenderTest, NoJobIsSuspendedWithoutTheCheckpointApi) {
  Suspender without(Hooks(), clock_, regions_, nullptr, 1000);
  Job& job = Running(1, 0, 5001);
  EXPECT_EQ(without.Suspend(job, By("alice")).code(), core::StatusCode::kUnimplemented);
  EXPECT_FALSE(without.Busy(1));
}

TEST_F(SuspenderTest, ExternalStoppedAndEndingJobsAreNotSuspended) {
  Job& external = Running(1, 0, 5001);
  external.mode = core::JobMode::kExternal;
  Job& stopped = Running(2, 1, 5002);
  stopped_.insert(2);
  Job& ending = Running(3, 2, 5003);
  ending_.insert(3);
  EXPECT_EQ(suspender_->Suspend(external, By("x")).code(), core::StatusCode::kFailedPrecondition);
  EXPECT_EQ(suspender_->Suspend(stopped, By("x")).code(), core::StatusCode::kFailedPrecondition);
  EXPECT_EQ(suspender_->Suspend(ending, By("x")).code(), core::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(checkpointer_->Calls().empty());
}

TEST_F(SuspenderTest, AFailedSuspensionLeavesTheJobRunningAndLetsItsCauseActInstead) {
  Job& job = Running(1, 0, 5001);
  checkpointer_->Fail("lock", 5001, core::DeadlineExceededError("CUDA_ERROR_NOT_READY"));
  SuspendCause cause;
  cause.by = "preemption by job 9";
  cause.preempted_for = 9;
  ASSERT_TRUE(suspender_->Suspend(job, cause).ok());
  WaitFor(1);
  EXPECT_EQ(job.state, JobState::kRunning);
  EXPECT_TRUE(capacity_->AllocationOf(1).has_value());
  EXPECT_NE(suspender_->Error(1).find("suspend failed"), std::string::npos) << suspender_->Error(1);
  EXPECT_NE(MessageOf("suspend_failed").find("; ended instead"), std::string::npos)
      << MessageOf("suspend_failed");
  EXPECT_EQ(failed_, std::set<uint64_t>{1});
}

TEST_F(SuspenderTest, AResumeTakesItsOwnGpuBackAndRestoresItsProcesses) {
  Job& job = Running(1, 0, 5001);
  ASSERT_TRUE(suspender_->Suspend(job, By("alice")).ok());
  WaitFor(1);
  ASSERT_EQ(job.state, JobState::kSuspended);
  clock_.Advance(5000);
  ASSERT_TRUE(suspender_->Resume(job, "alice").ok());
  EXPECT_EQ(suspender_->Flags(1), std::vector<std::string>{"resuming"});
  EXPECT_TRUE(capacity_->AllocationOf(1).has_value());  // Held before the restore.
  WaitFor(1);
  EXPECT_EQ(job.state, JobState::kRunning);
  EXPECT_EQ(job.allocation.gpu_uuids, std::vector<std::string>{"GPU-0"});
  EXPECT_EQ(checkpointer_->Get(5001), GpuProcessState::kRunning);
  EXPECT_EQ(job.suspended_total_ms, 5000);
  EXPECT_EQ(job.suspended_since_ms, 0);
  EXPECT_EQ(resumed_, std::set<uint64_t>{1});
  EXPECT_FALSE(HasEvent("moved", 1));
}

TEST_F(SuspenderTest, AJobWhoseGpuIsTakenResumesOnAnotherOfItsModelAndPool) {
  Job& job = Running(1, 0, 5001);
  ASSERT_TRUE(suspender_->Suspend(job, By("alice")).ok());
  WaitFor(1);
  Running(2, 0, 5002);  // Its GPU is someone else's now.
  ASSERT_TRUE(suspender_->Resume(job, "alice").ok());
  WaitFor(1);
  EXPECT_EQ(job.state, JobState::kRunning);
  EXPECT_EQ(job.allocation.gpu_uuids, std::vector<std::string>{"GPU-1"});
  EXPECT_EQ(regions_.regions[job.region_path].uuids, std::vector<std::string>{"GPU-1"});
  EXPECT_NE(MessageOf("moved").find("GPU-0 -> GPU-1"), std::string::npos) << MessageOf("moved");
}

TEST_F(SuspenderTest, AResumeWithoutRoomAnywhereIsRefusedAndHoldsNothing) {
  Job& job = Running(1, 0, 5001);
  ASSERT_TRUE(suspender_->Suspend(job, By("alice")).ok());
  WaitFor(1);
  Running(2, 0, 5002);
  Running(3, 1, 5003);
  core::Status s = suspender_->Resume(job, "alice");
  EXPECT_EQ(s.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("nor does any other GPU of its model have room"), std::string::npos)
      << s.message();
  EXPECT_FALSE(capacity_->AllocationOf(1).has_value());
  EXPECT_FALSE(suspender_->Busy(1));
}

TEST_F(SuspenderTest, AMoveSuspendsThenResumesOnTheTargetGpu) {
  Job& job = Running(1, 0, 5001);
  SuspendCause cause;
  cause.by = "alice";
  cause.move_to = "GPU-1";
  ASSERT_TRUE(suspender_->Suspend(job, cause).ok());
  WaitFor(1);  // The suspension, then the resume it starts at once.
  EXPECT_TRUE(HasEvent("suspended", 1));
  EXPECT_EQ(job.state, JobState::kRunning);
  EXPECT_NE(MessageOf("moved").find("GPU-0 -> GPU-1"), std::string::npos) << MessageOf("moved");
  EXPECT_EQ(job.allocation.gpu_uuids, std::vector<std::string>{"GPU-1"});
  ASSERT_EQ(checkpointer_->remaps.size(), 1u);
  ASSERT_EQ(checkpointer_->remaps[0].size(), 1u);
  EXPECT_EQ(checkpointer_->remaps[0][0].to_uuid, "GPU-1");
}

TEST_F(SuspenderTest, MovesGoOnlyToGpusOfTheJobsModelAndPoolAndNeverForContainersOrElasticJobs) {
  Job& job = Running(1, 0, 5001);
  EXPECT_EQ(suspender_->MoveCandidates(job), (std::vector<std::string>{"GPU-0", "GPU-1"}));
  EXPECT_TRUE(suspender_->CanMove(job).ok());
  Job container = job;
  container.image = "docker.io/library/ubuntu";
  EXPECT_EQ(suspender_->CanMove(container).code(), core::StatusCode::kFailedPrecondition);
  Job elastic = job;
  elastic.request.gpus_max = 4;
  EXPECT_EQ(suspender_->CanMove(elastic).code(), core::StatusCode::kFailedPrecondition);
}

TEST_F(SuspenderTest, OnlyTheJobOwnersProcessesAreItsToCheckpoint) {
  Job& job = Running(1, 0, 5001);
  regions_.pids[job.region_path] = {5001, 6001, 0};
  procs_.owners[6001] = ProcessOwner{0, 0, "root", {}};
  usage_[1].pids = {5001, 5002};
  procs_.owners[5002] = ProcessOwner{1000, 1000, "alice", {}};
  EXPECT_EQ(suspender_->ProcessesOf(job), (std::vector<int64_t>{5001, 5002}));
}

TEST_F(SuspenderTest, AProcessUsingTheGpuWhileItsJobIsSuspendedIsKilledOnce) {
  Job& job = Running(1, 0, 5001);
  ASSERT_TRUE(suspender_->Suspend(job, By("alice")).ok());
  WaitFor(1);
  procs_.owners[5009] = ProcessOwner{1000, 1000, "alice", {}};
  checkpointer_->Set(5009, GpuProcessState::kRunning);
  JobUsage use;
  use.pids = {5001, 5009};
  use.nvml_memory_by_gpu[0] = core::kGiB;
  suspender_->WatchSuspended(job, use);
  suspender_->WatchSuspended(job, use);
  ASSERT_EQ(procs_.signals.size(), 1u);
  EXPECT_EQ(procs_.signals[0], std::make_pair(int64_t{5009}, SIGKILL));
  EXPECT_TRUE(HasEvent("suspend_violation", 1));
  EXPECT_EQ(stderr_.size(), 1u);
}

TEST_F(SuspenderTest, ARestartPutsBackProcessesASuspensionLeftLocked) {
  Job& job = Running(1, 0, 5001);
  checkpointer_->Set(5001, GpuProcessState::kLocked);
  suspender_->Recover(job);
  EXPECT_EQ(checkpointer_->Get(5001), GpuProcessState::kRunning);
  // Checked again once a lock asked for before the restart could land.
  checkpointer_->Set(5001, GpuProcessState::kLocked);
  suspender_->RecheckRecovered();
  EXPECT_EQ(checkpointer_->Get(5001), GpuProcessState::kLocked);
  clock_.Advance(1000 + 2000);
  suspender_->RecheckRecovered();
  EXPECT_EQ(checkpointer_->Get(5001), GpuProcessState::kRunning);
}

// Job 1 suspended, its processes' request to be resumed in its slice.
class SuspenderOnDemandTest : public SuspenderTest {
 protected:
  Job& SuspendedAndAsking() {
    Job& job = Running(1, 0, 5001);
    EXPECT_TRUE(suspender_->Suspend(job, By("alice")).ok());
    WaitFor(1);
    regions_.resume_requests[job.region_path] = Suspender::SuspensionId(job);
    return job;
  }
};

TEST_F(SuspenderOnDemandTest, ARequestOfTheCurrentSuspensionQueuesTheJobOnce) {
  Job& job = SuspendedAndAsking();
  suspender_->WatchResumeRequests();
  suspender_->WatchResumeRequests();
  EXPECT_EQ(queue_, std::set<uint64_t>{1});
  EXPECT_EQ(suspender_->ResumeAskedMs(1), clock_.NowMs());
  EXPECT_EQ(suspender_->Flags(1), std::vector<std::string>{"resume_asked"});
  EXPECT_TRUE(capacity_->HasResumeTarget(1));
  EXPECT_EQ(std::count_if(events_.begin(), events_.end(),
                          [](const Event& e) { return e.kind == "resume_asked"; }),
            1);
  EXPECT_EQ(job.state, JobState::kSuspended);
}

TEST_F(SuspenderOnDemandTest, AStaleRequestOrOneTheAdminDoesNotAllowQueuesNothing) {
  Job& job = SuspendedAndAsking();
  resume_on_demand_ = false;
  suspender_->WatchResumeRequests();
  EXPECT_TRUE(queue_.empty());
  resume_on_demand_ = true;
  regions_.resume_requests[job.region_path] = Suspender::SuspensionId(job) - 1;
  suspender_->WatchResumeRequests();
  EXPECT_TRUE(queue_.empty());
  EXPECT_EQ(suspender_->ResumeAskedMs(1), 0);
}

TEST_F(SuspenderOnDemandTest, ThePlacedDemandResumesTheJobAndLeavesTheQueue) {
  Job& job = SuspendedAndAsking();
  suspender_->WatchResumeRequests();
  ASSERT_EQ(capacity_->TryPlace(1), core::FitResult::kPlaced);
  suspender_->ResumeOnDemand(job);
  EXPECT_TRUE(queue_.empty());  // A resume makes the demand moot.
  EXPECT_EQ(suspender_->ResumeAskedMs(1), 0);
  WaitFor(1);
  EXPECT_EQ(job.state, JobState::kRunning);
  EXPECT_NE(MessageOf("resumed").find("its own CUDA call (on demand"), std::string::npos)
      << MessageOf("resumed");
}

TEST_F(SuspenderOnDemandTest, AFailedOnDemandResumeIsNotAskedAgainForThisSuspension) {
  Job& job = SuspendedAndAsking();
  suspender_->WatchResumeRequests();
  ASSERT_EQ(capacity_->TryPlace(1), core::FitResult::kPlaced);
  checkpointer_->Fail("restore", 5001, core::InternalError("CUDA_ERROR_OUT_OF_MEMORY"));
  suspender_->ResumeOnDemand(job);
  WaitFor(1);
  EXPECT_EQ(job.state, JobState::kSuspended);
  EXPECT_FALSE(capacity_->AllocationOf(1).has_value());  // Its room went back.
  EXPECT_NE(MessageOf("resume_failed").find("until resumed by hand"), std::string::npos)
      << MessageOf("resume_failed");
  suspender_->WatchResumeRequests();
  EXPECT_TRUE(queue_.empty());
  EXPECT_EQ(suspender_->ResumeAskedMs(1), 0);
}

TEST_F(SuspenderTest, TheDaemonResumesAJobThatAskedOnceItsRoomIsBackAndNothingOutranksIt) {
  Job& job = Running(1, 0, 5001);
  SuspendCause cause = By("preemption by job 2");
  cause.preempted_for = 2;
  ASSERT_TRUE(suspender_->Suspend(job, cause).ok());
  WaitFor(1);
  ASSERT_TRUE(job.resume_when_fits);
  Running(2, 0, 5002);
  Running(3, 1, 5003);
  suspender_->ResumeWhenRoom();  // No room: quiet, tried again later.
  EXPECT_FALSE(suspender_->Busy(1));
  EXPECT_TRUE(suspender_->Error(1).empty());
  capacity_->Release(2);
  held_back_.insert(1);  // Something of higher priority waits.
  suspender_->ResumeWhenRoom();
  EXPECT_FALSE(suspender_->Busy(1));
  held_back_.clear();
  suspender_->ResumeWhenRoom();
  WaitFor(1);
  EXPECT_EQ(job.state, JobState::kRunning);
  EXPECT_FALSE(job.resume_when_fits);
}

TEST_F(SuspenderTest, ForgettingAJobDropsWhatItKeptOfIt) {
  Job& job = Running(1, 0, 5001);
  checkpointer_->Fail("lock", 5001, core::DeadlineExceededError("CUDA_ERROR_NOT_READY"));
  ASSERT_TRUE(suspender_->Suspend(job, By("alice")).ok());
  WaitFor(1);
  ASSERT_FALSE(suspender_->Error(1).empty());
  suspender_->Forget(1);
  EXPECT_EQ(suspender_->Error(1), "");
  EXPECT_TRUE(suspender_->Flags(1).empty());
}

}  // namespace
}  // namespace gpuslice::daemon
