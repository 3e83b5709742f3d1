// Resume on demand (suspend/suspender.h, docs/SUSPEND.md) over a fake driver
// and fake slices: a suspended job whose process writes the suspension's id
// into its region is queued as a waiting demand and resumed in queue order
// when it fits, where it was or on another GPU of its model; a request for
// another suspension, a failed resume, a restart, a cancel and a flood of
// requests change nothing else.

#include <gtest/gtest.h>

#include <string>

#include "daemon/jobs/service_suspend_fixture.h"

namespace gpuslice::daemon {
namespace {

class ResumeOnDemandTest : public SuspendTest {
 protected:
  ResumeOnDemandTest() = default;
  explicit ResumeOnDemandTest(InventorySnapshot gpus) : SuspendTest(std::move(gpus)) {}

  // Suspends job `id` and waits for it.
  void SuspendNow(uint64_t id) {
    ASSERT_TRUE(service_->live().Suspend(TestCaller(kUser), id).ok());
    Settle(id);
    ASSERT_EQ(State(id), JobState::kSuspended);
  }
  // What a process of job `id` does on its first CUDA call: copies the
  // page's suspension id into its region.
  void Ask(uint64_t id) {
    regions_.resume_requests[Get(id).job.region_path] = Limits(id).suspension;
  }
  // Ends job `id`'s processes after a cancel.
  void CancelAndEnd(uint64_t id) {
    ASSERT_TRUE(service_->Cancel(TestCaller(kUser), id).ok());
    EndProcesses(id);
  }
  int Count(uint64_t id, const std::string& kind) {
    EventQuery q;
    q.job_id = id;
    auto events = service_->events().Query(q);
    int n = 0;
    if (events.ok()) {
      for (const Event& e : *events) n += e.kind == kind;
    }
    return n;
  }
  std::string LastEvent(uint64_t id, const std::string& kind) {
    EventQuery q;
    q.job_id = id;
    auto events = service_->events().Query(q);
    std::string message;
    if (events.ok()) {
      for (const Event& e : *events) {
        if (e.kind == kind) message = e.message;
      }
    }
    return message;
  }
};

TEST_F(ResumeOnDemandTest, AJobWhoseProcessAsksIsResumedWhereItWasWithItsLimits) {
  uint64_t a = StartJob();
  EXPECT_EQ(Limits(a).suspension, 0u) << "a running job is not suspended";
  clock_.Advance(1000);
  SuspendNow(a);
  // The page says which suspension this is; nothing happens until asked.
  const uint64_t suspension = Limits(a).suspension;
  EXPECT_EQ(suspension, static_cast<uint64_t>(Get(a).job.suspended_since_ms));
  EXPECT_EQ(Limits(a).memory_bytes_per_device, 0u);
  service_->WatchResumeRequests();
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_FALSE(HasFlag(a, "resuming"));

  clock_.Advance(60'000);
  Ask(a);
  service_->WatchResumeRequests();
  EXPECT_TRUE(HasEvent(a, "resume_asked"));
  EXPECT_TRUE(HasFlag(a, "resuming")) << "it fits: resumed at once";
  // The page says "running" (and has its limits back) before the processes
  // are restored, so a waiting call goes on into the driver, which holds it
  // until its process is unlocked.
  EXPECT_EQ(Limits(a).suspension, 0u);
  EXPECT_EQ(Limits(a).memory_bytes_per_device, 60 * kGiB);
  Settle(a);
  EXPECT_EQ(State(a), JobState::kRunning);
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kRunning);
  EXPECT_EQ(Get(a).job.allocation.gpu_uuids, std::vector<std::string>({"GPU-0"}));
  EXPECT_NE(LastEvent(a, "resumed").find("on demand"), std::string::npos)
      << LastEvent(a, "resumed");
  EXPECT_GE(Get(a).job.suspended_total_ms, 60'000);
  // The request left in its region is for a suspension that is over: the
  // next suspension is not undone by it.
  clock_.Advance(1000);
  SuspendNow(a);
  EXPECT_NE(Limits(a).suspension, suspension);
  service_->WatchResumeRequests();
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_FALSE(HasFlag(a, "resuming"));
  EXPECT_EQ(Count(a, "resume_asked"), 1);
}

TEST_F(ResumeOnDemandTest, ARequestForAnotherSuspensionOrNoneIsIgnored) {
  uint64_t a = StartJob();
  SuspendNow(a);
  const std::string region = Get(a).job.region_path;
  const uint64_t id = Limits(a).suspension;
  for (uint64_t wrong : {uint64_t{0}, id + 1, id - 1, ~uint64_t{0}}) {
    regions_.resume_requests[region] = wrong;
    service_->WatchResumeRequests();
    service_->Tick();
    EXPECT_EQ(State(a), JobState::kSuspended) << wrong;
    EXPECT_FALSE(HasEvent(a, "resume_asked")) << wrong;
  }
}

TEST_F(ResumeOnDemandTest, ItWaitsInQueueOrderBehindJobsThatCameFirstAndSaysWhy) {
  uint64_t a = StartJob();
  SuspendNow(a);
  // b takes its room; c waits for b.
  auto b = Submit("60GiB");
  auto c = Submit("60GiB");
  ASSERT_TRUE(b.ok() && c.ok());
  service_->Tick();
  ASSERT_EQ(State(b->job.id), JobState::kRunning);
  ASSERT_EQ(State(c->job.id), JobState::kQueued);

  Ask(a);
  service_->WatchResumeRequests();
  JobView v = Get(a);
  EXPECT_EQ(v.job.state, JobState::kSuspended);
  EXPECT_TRUE(HasFlag(a, "resume_asked"));
  EXPECT_EQ(v.queue_position, 2) << "behind c, which was there first";
  EXPECT_EQ(
      v.waiting_for.rfind(
          "waiting for GPU memory to resume on demand: behind job " + std::to_string(c->job.id), 0),
      0u)
      << v.waiting_for;
  // A job submitted after it asked goes behind it; one of a higher
  // priority, before it.
  auto d = Submit("60GiB");
  ASSERT_TRUE(d.ok());
  service_->Tick();
  EXPECT_EQ(Get(d->job.id).queue_position, 3);
  auto e = Submit("60GiB", "high");
  ASSERT_TRUE(e.ok());
  service_->Tick();
  EXPECT_EQ(Get(e->job.id).queue_position, 1);
  EXPECT_EQ(Get(a).queue_position, 3);
  ASSERT_TRUE(service_->Cancel(TestCaller(kUser), e->job.id).ok());
  service_->Tick();

  CancelAndEnd(b->job.id);
  EXPECT_EQ(State(c->job.id), JobState::kRunning) << "c came first";
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_EQ(Get(a).queue_position, 1);
  EXPECT_NE(Get(a).waiting_for.find("first in line"), std::string::npos) << Get(a).waiting_for;

  CancelAndEnd(c->job.id);
  Settle(a);
  EXPECT_EQ(State(a), JobState::kRunning);
  EXPECT_EQ(State(d->job.id), JobState::kQueued);
  EXPECT_EQ(Count(a, "resumed"), 1);
}

TEST_F(ResumeOnDemandTest, ItsAgeInTheQueueCountsFromWhenItAskedNotFromItsSubmission) {
  // Submitted an hour before the jobs it then waits behind: aging (fair
  // share's queue rank) must not put it first once the queue is re-ranked.
  uint64_t a = StartJob();
  clock_.Advance(3'600'000);
  SuspendNow(a);
  auto b = Submit("60GiB");
  auto c = Submit("60GiB");
  ASSERT_TRUE(b.ok() && c.ok());
  service_->Tick();
  ASSERT_EQ(State(b->job.id), JobState::kRunning);
  clock_.Advance(60'000);
  Ask(a);
  service_->WatchResumeRequests();
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(2'000);  // Past the re-ranking interval.
    service_->Tick();
    EXPECT_EQ(Get(c->job.id).queue_position, 1) << "c waited first, pass " << i;
    EXPECT_EQ(Get(a).queue_position, 2) << "pass " << i;
  }
  CancelAndEnd(b->job.id);
  EXPECT_EQ(State(c->job.id), JobState::kRunning);
  EXPECT_EQ(State(a), JobState::kSuspended);
}

TEST_F(ResumeOnDemandTest, PreemptionNeverActsForAResume) {
  options_.rules.preemption = *core::ParsePreemptionPolicy("lower");
  Restart();
  uint64_t a = StartJob();
  SuspendNow(a);
  auto low = Submit("60GiB", "low");
  ASSERT_TRUE(low.ok());
  service_->Tick();
  ASSERT_EQ(State(low->job.id), JobState::kRunning);
  Ask(a);
  for (int i = 0; i < 5; ++i) {
    service_->WatchResumeRequests();
    clock_.Advance(1000);
    service_->Tick();
  }
  // a (normal) waits for the low-priority job rather than preempting it:
  // it gave its room up, and takes it back only when it is free.
  EXPECT_EQ(State(low->job.id), JobState::kRunning);
  EXPECT_FALSE(HasEvent(low->job.id, "preempted"));
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_EQ(Get(a).queue_position, 1);
  CancelAndEnd(low->job.id);
  Settle(a);
  EXPECT_EQ(State(a), JobState::kRunning);
}

TEST_F(ResumeOnDemandTest, AFailedResumeIsNotRetriedForThatSuspension) {
  uint64_t a = StartJob();
  SuspendNow(a);
  checkpointer_->Fail("restore", kCuda, core::InternalError("cuCheckpointProcessRestore: boom"));
  Ask(a);
  service_->WatchResumeRequests();
  Settle(a);
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_TRUE(HasEvent(a, "resume_failed"));
  EXPECT_NE(LastEvent(a, "resume_failed").find("until resumed by hand"), std::string::npos);
  // Closed again, and still saying which suspension it is in.
  EXPECT_EQ(Limits(a).memory_bytes_per_device, 0u);
  EXPECT_NE(Limits(a).suspension, 0u);
  // Its processes keep asking; the daemon does not try again every tick.
  for (int i = 0; i < 5; ++i) {
    service_->WatchResumeRequests();
    service_->Tick();
  }
  EXPECT_EQ(Count(a, "resume_asked"), 1);
  EXPECT_FALSE(HasFlag(a, "resuming"));
  // By hand, once the cause is gone.
  checkpointer_->failures.clear();
  ASSERT_TRUE(service_->live().Resume(TestCaller(kUser), a).ok());
  Settle(a);
  EXPECT_EQ(State(a), JobState::kRunning);
}

TEST_F(ResumeOnDemandTest, ADaemonRestartWhileItWaitsLosesNothingAndResumesItOnce) {
  uint64_t a = StartJob();
  SuspendNow(a);
  auto b = Submit("60GiB");
  ASSERT_TRUE(b.ok());
  service_->Tick();
  Ask(a);
  service_->WatchResumeRequests();
  ASSERT_EQ(Get(a).queue_position, 1);

  Restart();
  // The request is in the job's region, its suspension in the ledger.
  service_->Tick();
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_TRUE(HasFlag(a, "resume_asked"));
  EXPECT_EQ(Get(a).queue_position, 1);
  CancelAndEnd(b->job.id);
  Settle(a);
  EXPECT_EQ(State(a), JobState::kRunning);
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kRunning);
  for (int i = 0; i < 3; ++i) {
    service_->WatchResumeRequests();
    service_->Tick();
  }
  EXPECT_EQ(Count(a, "resumed"), 1);
  int restores = 0;
  for (const std::string& call : checkpointer_->Calls()) restores += call.rfind("restore", 0) == 0;
  EXPECT_EQ(restores, 1);
}

TEST_F(ResumeOnDemandTest, ACancelWhileItWaitsEndsItAndItsDemand) {
  uint64_t a = StartJob();
  SuspendNow(a);
  auto b = Submit("60GiB");
  ASSERT_TRUE(b.ok());
  service_->Tick();
  Ask(a);
  service_->WatchResumeRequests();
  ASSERT_EQ(service_->table().queued_count(), 1u);
  CancelAndEnd(a);
  EXPECT_EQ(State(a), JobState::kCancelled);
  EXPECT_EQ(service_->table().queued_count(), 0u);
  // Its room is not held for it: a new job waits for b only.
  CancelAndEnd(b->job.id);
  auto c = Submit("60GiB");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->job.state, JobState::kRunning);
}

// "A job flooding requests": whatever its processes write, and however
// often, the daemon reads one word per pass while the job does not wait yet,
// none once it waits, and queues it once.
TEST_F(ResumeOnDemandTest, AFloodOfRequestsQueuesTheJobOnceAndCostsOneReadPerPass) {
  uint64_t a = StartJob();
  SuspendNow(a);
  auto b = Submit("60GiB");
  ASSERT_TRUE(b.ok());
  service_->Tick();
  const uint64_t before = regions_.resume_reads;
  for (int i = 0; i < 100; ++i) {
    regions_.resume_requests[Get(a).job.region_path] = 1000 + i;  // Noise.
    service_->WatchResumeRequests();
  }
  EXPECT_EQ(regions_.resume_reads - before, 100u);
  for (int i = 0; i < 1000; ++i) {
    Ask(a);
    service_->WatchResumeRequests();
  }
  EXPECT_EQ(Count(a, "resume_asked"), 1);
  EXPECT_EQ(service_->table().queued_count(), 1u);
  EXPECT_EQ(regions_.resume_reads - before, 101u) << "no reads while it waits";
}

TEST_F(ResumeOnDemandTest, TurnedOffTheSliceNeverSaysSuspendedAndRequestsAreIgnored) {
  options_.rules.resume_on_demand = false;
  Restart();
  uint64_t a = StartJob();
  SuspendNow(a);
  EXPECT_EQ(Limits(a).suspension, 0u);
  regions_.resume_requests[Get(a).job.region_path] =
      static_cast<uint64_t>(Get(a).job.suspended_since_ms);
  service_->WatchResumeRequests();
  service_->Tick();
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_FALSE(HasEvent(a, "resume_asked"));
}

// Two H100s and an A100: a job whose own GPU is taken resumes on the other
// H100 (a move), never on the A100.
InventorySnapshot TwoH100sAndAnA100() {
  InventorySnapshot s = SimulatedGpus(3);
  s.gpus[2].model = "A100";
  return s;
}

class ResumeOnDemandMoveTest : public ResumeOnDemandTest {
 protected:
  ResumeOnDemandMoveTest() : ResumeOnDemandTest(TwoH100sAndAnA100()) {}
  std::string GpuOf(uint64_t id) { return Get(id).job.allocation.gpu_uuids.at(0); }
};

TEST_F(ResumeOnDemandMoveTest, ItsGpuTakenItResumesOnAnotherOfItsModelOrWaits) {
  uint64_t a = StartJob();
  const std::string from = GpuOf(a);
  ASSERT_NE(from, "GPU-2");
  SuspendNow(a);
  std::vector<uint64_t> fill;
  for (int i = 0; i < 3; ++i) {
    auto v = Submit("60GiB");
    ASSERT_TRUE(v.ok());
    fill.push_back(v->job.id);
  }
  service_->Tick();
  for (uint64_t id : fill) ASSERT_EQ(State(id), JobState::kRunning);
  Ask(a);
  service_->WatchResumeRequests();
  service_->Tick();
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_EQ(Get(a).queue_position, 1);
  // The A100 frees up: not a GPU it can be restored onto.
  uint64_t on_a100 = 0, on_other = 0;
  for (uint64_t id : fill) {
    if (GpuOf(id) == "GPU-2") on_a100 = id;
    if (GpuOf(id) != "GPU-2" && GpuOf(id) != from) on_other = id;
  }
  ASSERT_NE(on_a100, 0u);
  ASSERT_NE(on_other, 0u);
  CancelAndEnd(on_a100);
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_FALSE(HasFlag(a, "resuming"));
  // The other H100 does.
  CancelAndEnd(on_other);
  Settle(a);
  EXPECT_EQ(State(a), JobState::kRunning);
  EXPECT_NE(GpuOf(a), from);
  EXPECT_NE(GpuOf(a), "GPU-2");
  EXPECT_TRUE(HasEvent(a, "moved"));
  EXPECT_EQ(Limits(a).uuids, std::vector<std::string>({GpuOf(a)}));
}

}  // namespace
}  // namespace gpuslice::daemon
