// Suspend and resume (service_suspend.cc, checkpointer.h) over a fake
// driver: what the job's slice and the GPU's capacity do at each step, who
// may ask, failures that leave the job as it was, preemption and idle
// reclaim by suspension, a daemon restart, and the sequencing over several
// processes with its rollback.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "daemon/jobs/service_suspend_fixture.h"

namespace gpuslice::daemon {
namespace {

TEST_F(SuspendTest, FreesTheGpuForTheQueueAndClosesTheSlice) {
  uint64_t a = StartJob();
  auto b = Submit("60GiB");  // Does not fit beside it.
  ASSERT_TRUE(b.ok());
  service_->Tick();
  EXPECT_EQ(State(b->job.id), JobState::kQueued);

  ASSERT_TRUE(service_->live().Suspend(TestCaller(kUser), a).ok());
  EXPECT_TRUE(HasFlag(a, "suspending"));
  EXPECT_EQ(State(a), JobState::kRunning);  // Until the worker is done.
  Settle(a);
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kCheckpointed);
  // Another user's process is never the daemon's to lock, whatever the
  // slice's (job-written) process list says.
  EXPECT_EQ(checkpointer_->Get(kStranger), GpuProcessState::kRunning);
  for (const std::string& call : checkpointer_->Calls()) {
    EXPECT_EQ(call.find(std::to_string(kStranger)), std::string::npos) << call;
  }
  EXPECT_EQ(Limits(a).memory_bytes_per_device, 0u);  // Nothing may allocate ...
  EXPECT_TRUE(Limits(a).launches_paused);            // ... or launch meanwhile.
  EXPECT_TRUE(HasEvent(a, "suspended"));
  EXPECT_EQ(Get(a).job.reason, "suspended by u1000");
  service_->Tick();
  EXPECT_EQ(State(b->job.id), JobState::kRunning);  // Its room went to the queue.
  EXPECT_EQ(service_->table().running_count(), 1u);
}

TEST_F(SuspendTest, ResumesOnlyWhenItsGpuHasRoomAndRestoresItsLimits) {
  uint64_t a = StartJob();
  ASSERT_TRUE(service_->live().Suspend(TestCaller(kUser), a).ok());
  Settle(a);
  auto b = Submit("60GiB");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->job.state, JobState::kRunning);
  clock_.Advance(5000);

  core::Status s = service_->live().Resume(TestCaller(kUser), a);
  EXPECT_EQ(s.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("lack room"), std::string::npos) << s.message();
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kCheckpointed);

  ASSERT_TRUE(service_->Cancel(TestCaller(kUser), b->job.id).ok());
  launcher_.alive.erase(Get(b->job.id).job.pid);
  service_->Tick();
  ASSERT_TRUE(service_->live().Resume(TestCaller(kUser), a).ok());
  EXPECT_TRUE(HasFlag(a, "resuming"));
  Settle(a);
  JobView v = Get(a);
  EXPECT_EQ(v.job.state, JobState::kRunning);
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kRunning);
  EXPECT_EQ(Limits(a).memory_bytes_per_device, 60 * kGiB);
  EXPECT_FALSE(Limits(a).launches_paused);
  EXPECT_EQ(v.job.suspended_since_ms, 0);
  EXPECT_GE(v.job.suspended_total_ms, 5000);
  EXPECT_TRUE(HasEvent(a, "resumed"));
  // Its room is held again: a 60 GiB job must wait.
  auto c = Submit("60GiB");
  ASSERT_TRUE(c.ok());
  service_->Tick();
  EXPECT_EQ(State(c->job.id), JobState::kQueued);
}

TEST_F(SuspendTest, AFailedLockLeavesTheJobRunningWithTheReason) {
  uint64_t a = StartJob();
  constexpr int64_t kSecond = 5003;
  procs_.owners[kSecond] = {kUser, kUser, "u1000", {}};
  checkpointer_->Set(kSecond, GpuProcessState::kRunning);
  regions_.pids[Get(a).job.region_path].push_back(static_cast<int32_t>(kSecond));
  checkpointer_->Fail("lock", kSecond,
                      core::DeadlineExceededError("cuCheckpointProcessLock: CUDA_ERROR_NOT_READY"));
  ASSERT_TRUE(service_->live().Suspend(TestCaller(kUser), a).ok());
  Settle(a);
  JobView v = Get(a);
  EXPECT_EQ(v.job.state, JobState::kRunning);
  EXPECT_NE(v.checkpoint_error.find("CUDA_ERROR_NOT_READY"), std::string::npos)
      << v.checkpoint_error;
  EXPECT_TRUE(HasEvent(a, "suspend_failed"));
  // The process locked before the failure runs again.
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kRunning);
  EXPECT_EQ(Limits(a).memory_bytes_per_device, 60 * kGiB);
  auto b = Submit("60GiB");  // Its room is still its own.
  ASSERT_TRUE(b.ok());
  service_->Tick();
  EXPECT_EQ(State(b->job.id), JobState::kQueued);
}

TEST_F(SuspendTest, OnlyTheOwnerOrAnAdminAndOnlyARunningJob) {
  uint64_t a = StartJob();
  EXPECT_EQ(service_->live().Suspend(TestCaller(1001), a).code(),
            core::StatusCode::kPermissionDenied);
  auto queued = Submit("60GiB");
  ASSERT_TRUE(queued.ok());
  EXPECT_EQ(service_->live().Suspend(TestCaller(kUser), queued->job.id).code(),
            core::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(service_->live().Suspend(TestCaller(0, true), a).ok());
  EXPECT_EQ(service_->live().Suspend(TestCaller(kUser), a).code(),
            core::StatusCode::kFailedPrecondition);
  Settle(a);
  EXPECT_EQ(service_->live().Suspend(TestCaller(kUser), a).code(),
            core::StatusCode::kFailedPrecondition);
  EXPECT_EQ(service_->live().Resume(TestCaller(1001), a).code(),
            core::StatusCode::kPermissionDenied);
  EXPECT_EQ(service_->live().Suspend(TestCaller(kUser), 999).code(), core::StatusCode::kNotFound);
}

TEST_F(SuspendTest, WithoutTheDriversApiItSaysSo) {
  uint64_t a = StartJob();
  checkpointer_->available = core::UnimplementedError("the CUDA driver has no checkpoint API");
  core::Status s = service_->live().Suspend(TestCaller(kUser), a);
  EXPECT_EQ(s.code(), core::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("checkpoint API"), std::string::npos);
  EXPECT_EQ(State(a), JobState::kRunning);
}

TEST_F(SuspendTest, StaysSuspendedThroughARestartAndCanBeResumed) {
  uint64_t a = StartJob();
  ASSERT_TRUE(service_->live().Suspend(TestCaller(kUser), a).ok());
  Settle(a);
  Restart();
  service_->Tick();
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kCheckpointed);
  // It holds nothing after the restart either.
  auto b = Submit("60GiB");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->job.state, JobState::kRunning);
  ASSERT_TRUE(service_->Cancel(TestCaller(kUser), b->job.id).ok());
  launcher_.alive.erase(Get(b->job.id).job.pid);
  service_->Tick();
  ASSERT_TRUE(service_->live().Resume(TestCaller(kUser), a).ok());
  Settle(a);
  EXPECT_EQ(State(a), JobState::kRunning);
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kRunning);
}

TEST_F(SuspendTest, ARestartPutsBackWhatAnInterruptedSuspensionLeftLocked) {
  uint64_t a = StartJob();
  // The daemon died after locking, before checkpointing: the ledger still
  // says running, the process is locked.
  checkpointer_->Set(kCuda, GpuProcessState::kLocked);
  Restart();
  EXPECT_EQ(State(a), JobState::kRunning);
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kRunning);
}

TEST_F(SuspendTest, ALockThatLandsAfterTheRestartIsPutBackOnceItHadItsTime) {
  uint64_t a = StartJob();
  // The daemon died with a lock asked for and not yet carried out: the
  // restarted daemon finds the process running, then the lock lands.
  Restart();
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kRunning);
  checkpointer_->Set(kCuda, GpuProcessState::kLocked);
  service_->Tick();
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kLocked) << "too early to tell";
  clock_.Advance(options_.suspend_lock_timeout_ms + 2000);
  service_->Tick();
  EXPECT_EQ(State(a), JobState::kRunning);
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kRunning);
}

TEST_F(SuspendTest, EndsWhenItsProcessesEndWhileSuspended) {
  uint64_t a = StartJob();
  ASSERT_TRUE(service_->live().Suspend(TestCaller(kUser), a).ok());
  Settle(a);
  EndProcesses(a);
  EXPECT_EQ(State(a), JobState::kExited);
}

TEST_F(SuspendTest, CancelEndsASuspendedJob) {
  uint64_t a = StartJob();
  ASSERT_TRUE(service_->live().Suspend(TestCaller(kUser), a).ok());
  Settle(a);
  ASSERT_TRUE(service_->Cancel(TestCaller(kUser), a).ok());
  EndProcesses(a);
  EXPECT_EQ(State(a), JobState::kCancelled);
}

TEST_F(SuspendTest, AProcessUsingTheGpuWhileItsJobIsSuspendedIsKilled) {
  uint64_t a = StartJob();
  ASSERT_TRUE(service_->live().Suspend(TestCaller(kUser), a).ok());
  Settle(a);
  // The user restored the process through the driver behind the daemon's
  // back: NVML lists it with memory on the GPU.
  checkpointer_->Set(kCuda, GpuProcessState::kRunning);
  GpuUsage g;
  g.index = 0;
  g.memory_total = 80 * kGiB;
  GpuProcess p;
  p.pid = static_cast<uint32_t>(kCuda);
  p.used_memory = 60 * kGiB;
  g.processes.push_back(p);
  inventory_.usage = {g};
  procs_.groups[kCuda] = Get(a).job.pid;
  clock_.Advance(2000);
  service_->Tick();
  bool killed = false;
  for (const auto& [pid, sig] : procs_.signals) killed |= pid == kCuda && sig == SIGKILL;
  EXPECT_TRUE(killed);
  EXPECT_TRUE(HasEvent(a, "suspend_violation"));
}

TEST_F(SuspendTest, PreemptionSuspendsTheVictimAndResumesItWhenThereIsRoom) {
  const uint64_t low = StartVictim();
  auto high = Submit("60GiB", "high");
  ASSERT_TRUE(high.ok());
  service_->Tick();
  Settle(low);
  service_->Tick();
  EXPECT_EQ(State(low), JobState::kSuspended);
  EXPECT_TRUE(Get(low).job.resume_when_fits);
  EXPECT_EQ(State(high->job.id), JobState::kRunning);
  EXPECT_TRUE(launcher_.signals.empty());  // Nobody was sent SIGTERM.
  // The high-priority job ends: the victim comes back on its own.
  launcher_.alive.erase(Get(high->job.id).job.pid);
  for (int i = 0; i < 3 && !HasFlag(low, "resuming"); ++i) {
    clock_.Advance(5000);
    service_->Tick();
  }
  Settle(low);
  EXPECT_EQ(State(low), JobState::kRunning);
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kRunning);
  EXPECT_TRUE(HasEvent(low, "resumed"));
}

TEST_F(SuspendTest, AVictimWhoseRestoreFailsIsNotRetriedEveryTick) {
  const uint64_t low = StartVictim();
  auto high = Submit("60GiB", "high");
  ASSERT_TRUE(high.ok());
  service_->Tick();
  Settle(low);
  ASSERT_EQ(State(low), JobState::kSuspended);
  checkpointer_->Fail("restore", kCuda, core::InternalError("CUDA_ERROR_UNKNOWN"));
  launcher_.alive.erase(Get(high->job.id).job.pid);
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(2000);
    service_->Tick();
    Settle(low);
  }
  EXPECT_EQ(State(low), JobState::kSuspended);
  EXPECT_FALSE(Get(low).job.resume_when_fits);
  EventQuery q;
  q.job_id = low;
  auto events = service_->events().Query(q);
  ASSERT_TRUE(events.ok());
  int failures = 0;
  for (const Event& e : *events) failures += e.kind == "resume_failed";
  EXPECT_EQ(failures, 1);
  // Its owner can still resume it once the cause is gone.
  checkpointer_->failures.clear();
  ASSERT_TRUE(service_->live().Resume(TestCaller(kUser), low).ok());
  Settle(low);
  EXPECT_EQ(State(low), JobState::kRunning);
}

TEST_F(SuspendTest, APreemptionVictimThatCannotBeCheckpointedIsEndedAsBefore) {
  const uint64_t low = StartVictim();
  checkpointer_->Fail("checkpoint", kCuda, core::InternalError("CUDA_ERROR_UNKNOWN"));
  auto high = Submit("60GiB", "high");
  ASSERT_TRUE(high.ok());
  service_->Tick();
  Settle(low);
  EXPECT_TRUE(HasEvent(low, "suspend_failed"));
  EXPECT_TRUE(HasEvent(low, "preempted"));
  launcher_.alive.erase(Get(low).job.pid);
  service_->Tick();
  service_->Tick();
  EXPECT_EQ(State(low), JobState::kCancelled);
  EXPECT_EQ(State(high->job.id), JobState::kRunning);
}

TEST_F(SuspendTest, IdleReclaimSuspendsAndFallsBackWhenItCannot) {
  options_.rules.idle_after_ms = 3000;
  options_.rules.idle_action = IdleAction::kSuspend;
  options_.rules.idle_action_always = true;
  options_.sample_interval_ms = 1000;
  Restart();
  uint64_t a = StartJob();
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(1000);
    service_->Tick();
  }
  Settle(a);
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_EQ(Get(a).job.reason, "suspended by idle reclaim");

  // A job whose process the driver refuses: paused instead (the fallback).
  options_.rules.idle_suspend_fallback = IdleAction::kPause;
  Restart();
  ASSERT_TRUE(service_->live().Resume(TestCaller(kUser), a).ok());
  Settle(a);
  ASSERT_EQ(State(a), JobState::kRunning);
  checkpointer_->Fail("lock", kCuda, core::FailedPreconditionError("CUDA_ERROR_ILLEGAL_STATE"));
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(1000);
    service_->Tick();
  }
  Settle(a);
  EXPECT_EQ(State(a), JobState::kRunning);
  EXPECT_TRUE(HasFlag(a, "paused"));
  EXPECT_TRUE(HasEvent(a, "suspend_failed"));
}

TEST_F(SuspendTest, ASuspendedJobCountsAgainstItsQuotaOnlyIfTheAdminSaysSo) {
  auto charge = [&] {
    for (const QuotaView& q : service_->quotas().Quotas()) {
      if (q.who.name == "u1000") return q.in_use.memory_bytes;
    }
    return uint64_t{0};
  };
  core::Quota quota;
  quota.memory_bytes = 100 * kGiB;
  ASSERT_TRUE(service_->quotas()
                  .SetQuota(TestCaller(0, true), {core::PrincipalKind::kUser, "u1000"}, quota)
                  .ok());
  uint64_t a = StartJob();
  EXPECT_EQ(charge(), 60 * kGiB);
  ASSERT_TRUE(service_->live().Suspend(TestCaller(kUser), a).ok());
  Settle(a);
  EXPECT_EQ(charge(), 0u);
  options_.rules.suspended_counts_in_quota = true;
  Restart();
  EXPECT_EQ(charge(), 60 * kGiB);
}

// The sequencing over a job's processes, on the fake driver alone.
TEST(SuspendProcesses, LocksAllBeforeCheckpointingAnyAndSkipsNonCudaProcesses) {
  FakeCheckpointer cp;
  cp.Set(1, GpuProcessState::kRunning);
  cp.Set(2, GpuProcessState::kRunning);
  CheckpointOutcome out = SuspendProcesses(cp, {1, 3, 2}, 1000);
  ASSERT_TRUE(out.status.ok()) << out.status.ToString();
  EXPECT_EQ(out.pids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(cp.Calls(),
            (std::vector<std::string>{"lock 1", "lock 2", "checkpoint 1", "checkpoint 2"}));
  out = ResumeProcesses(cp, {1, 3, 2}, {});
  ASSERT_TRUE(out.status.ok());
  EXPECT_EQ(cp.Get(1), GpuProcessState::kRunning);
  EXPECT_EQ(cp.Get(2), GpuProcessState::kRunning);
}

TEST(SuspendProcesses, AJobWithoutACudaProcessIsNotSuspended) {
  FakeCheckpointer cp;
  CheckpointOutcome out = SuspendProcesses(cp, {1, 2}, 1000);
  EXPECT_EQ(out.status.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(out.status.message().find("no CUDA process"), std::string::npos);
}

TEST(SuspendProcesses, AFailedCheckpointPutsEveryProcessBackToRunning) {
  FakeCheckpointer cp;
  cp.Set(1, GpuProcessState::kRunning);
  cp.Set(2, GpuProcessState::kRunning);
  cp.Fail("checkpoint", 2, core::ResourceExhaustedError("no host memory"));
  CheckpointOutcome out = SuspendProcesses(cp, {1, 2}, 1000);
  EXPECT_EQ(out.status.code(), core::StatusCode::kResourceExhausted);
  EXPECT_EQ(cp.Get(1), GpuProcessState::kRunning);
  EXPECT_EQ(cp.Get(2), GpuProcessState::kRunning);
}

TEST(SuspendProcesses, RefusesAProcessThatIsNotRunning) {
  FakeCheckpointer cp;
  cp.Set(1, GpuProcessState::kRunning);
  cp.Set(2, GpuProcessState::kLocked);  // Someone else holds it.
  CheckpointOutcome out = SuspendProcesses(cp, {1, 2}, 1000);
  EXPECT_EQ(out.status.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(out.status.message().find("process 2 is locked"), std::string::npos);
  EXPECT_EQ(cp.Get(1), GpuProcessState::kRunning);
}

TEST(SuspendProcesses, ALockThatLandsFromADeadRequesterIsTakenAndUndoneOnFailure) {
  FakeCheckpointer cp;
  cp.Set(1, GpuProcessState::kRunning);
  cp.Set(2, GpuProcessState::kLocked);  // Its lock landed after the state read.
  cp.Fail("lock", 2, core::FailedPreconditionError("illegal state"));
  CheckpointOutcome out = SuspendProcesses(cp, {1, 2}, 1000);
  // Refused as not running when seen locked before the lock...
  EXPECT_EQ(out.status.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_EQ(cp.Get(1), GpuProcessState::kRunning);
  // ...taken when the lock fails and the process is locked then.
  struct LandsOnLock : FakeCheckpointer {
    core::Result<GpuProcessState> StateOf(int64_t pid) override {
      auto st = FakeCheckpointer::StateOf(pid);
      if (pid == 2 && reads++ == 0) return GpuProcessState::kRunning;
      return st;
    }
    int reads = 0;
  } race;
  race.Set(1, GpuProcessState::kRunning);
  race.Set(2, GpuProcessState::kLocked);
  race.Fail("lock", 2, core::FailedPreconditionError("illegal state"));
  out = SuspendProcesses(race, {1, 2}, 1000);
  ASSERT_TRUE(out.status.ok()) << out.status.ToString();
  EXPECT_EQ(race.Get(2), GpuProcessState::kCheckpointed);
  // A checkpoint that fails then unlocks it: nothing stays locked.
  race.Set(1, GpuProcessState::kRunning);
  race.Set(2, GpuProcessState::kLocked);
  race.reads = 0;
  race.Fail("checkpoint", 1, core::ResourceExhaustedError("no host memory"));
  out = SuspendProcesses(race, {1, 2}, 1000);
  EXPECT_EQ(out.status.code(), core::StatusCode::kResourceExhausted);
  EXPECT_EQ(race.Get(1), GpuProcessState::kRunning);
  EXPECT_EQ(race.Get(2), GpuProcessState::kRunning);
}

TEST(ResumeProcesses, AFailedRestoreLeavesTheJobWhollySuspended) {
  FakeCheckpointer cp;
  cp.Set(1, GpuProcessState::kCheckpointed);
  cp.Set(2, GpuProcessState::kCheckpointed);
  cp.Fail("restore", 2, core::ResourceExhaustedError("CUDA_ERROR_OUT_OF_MEMORY"));
  CheckpointOutcome out = ResumeProcesses(cp, {1, 2}, {});
  EXPECT_EQ(out.status.code(), core::StatusCode::kResourceExhausted);
  EXPECT_EQ(cp.Get(1), GpuProcessState::kCheckpointed);
  EXPECT_EQ(cp.Get(2), GpuProcessState::kCheckpointed);
}

}  // namespace
}  // namespace gpuslice::daemon
