// Scheduling a team can trust (service_schedule.cc) over a fake
// driver and a hand-moved clock: the head's expected start from run-time
// estimates, fair share in the queue order, automatic defragmentation (and
// what is never moved), packing fractions while a whole-GPU job waits,
// over-quota borrowing and its reclaim, the idle-reclaim exemptions and
// GPU models.

#include <gtest/gtest.h>

#include <set>

#include "daemon/jobs/service_suspend_fixture.h"

namespace gpuslice::daemon {
namespace {

const Caller kAdmin = TestCaller(0, true);
constexpr int64_t kHourMs = 3600 * 1000;

class ScheduleTest : public SuspendTest {
 protected:
  ScheduleTest() : SuspendTest(SimulatedGpus(3)) {}
  void SetUp() override {
    // Users 1000 and 1001 are in group "ml", 2000 in "ops" (group quotas).
    options_.groups_of = [](const std::string& user, uint32_t) {
      return std::vector<std::string>{user == "u2000" ? "ops" : "ml"};
    };
    SuspendTest::SetUp();
  }
  core::Result<JobView> SubmitAs(uint32_t uid, core::RequestFields f, bool restartable = false,
                                 bool no_idle_reclaim = false) {
    SubmitSpec s;
    s.fields = std::move(f);
    s.argv = {"work"};
    s.cwd = "/home/u";
    s.restartable = restartable;
    s.no_idle_reclaim = no_idle_reclaim;
    return service_->intake().Submit(TestCaller(uid), s);
  }
  static core::RequestFields Mem(const std::string& mem) {
    core::RequestFields f;
    f.mem = mem;
    return f;
  }
  static core::RequestFields Gpus(const std::string& n) {
    core::RequestFields f;
    f.gpus = n;
    return f;
  }
  // A running job whose slice lists a CUDA process `pid` of its owner.
  uint64_t WithCuda(const core::Result<JobView>& v, int64_t pid, uint32_t uid = kUser) {
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    if (!v.ok()) return 0;
    EXPECT_EQ(State(v->job.id), JobState::kRunning);
    regions_.pids[Get(v->job.id).job.region_path] = {static_cast<int32_t>(pid)};
    procs_.owners[pid] = {uid, uid, "u" + std::to_string(uid), {}};
    checkpointer_->Set(pid, GpuProcessState::kRunning);
    return v->job.id;
  }
  std::string GpuOf(uint64_t id) { return Get(id).job.allocation.gpu_uuids.at(0); }
  // Ticks (a second each) until every checkpoint worker is done.
  void Ticks(int n) {
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < 50; ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        service_->Tick();
      }
      clock_.Advance(1000);
      service_->Tick();
    }
  }
  int Count(uint64_t id, const std::string& kind) {
    EventQuery q;
    q.job_id = id;
    auto events = service_->events().Query(q);
    int n = 0;
    for (const Event& e : events.ok() ? *events : std::vector<Event>{}) n += e.kind == kind;
    return n;
  }
  std::string Message(uint64_t id, const std::string& kind) {
    EventQuery q;
    q.job_id = id;
    auto events = service_->events().Query(q);
    for (const Event& e : events.ok() ? *events : std::vector<Event>{}) {
      if (e.kind == kind) return e.message;
    }
    return "";
  }
};

// Without run times, the head's reservation was unknown; with
// the default estimate it is due when a running job is expected to end.
TEST_F(ScheduleTest, TheHeadSaysWhenItExpectsToStartByTheRunTimeEstimates) {
  auto a = SubmitAs(kUser, Gpus("2"));
  ASSERT_TRUE(a.ok());
  clock_.Advance(10 * 60 * 1000);  // It has run 10 minutes of its hour.
  auto head = SubmitAs(kUser, Gpus("2"));
  ASSERT_TRUE(head.ok());
  JobView v = Get(head->job.id);
  ASSERT_EQ(v.job.state, JobState::kQueued);
  ASSERT_TRUE(v.expected_start_ms.has_value()) << v.waiting_for;
  EXPECT_EQ(*v.expected_start_ms, a->job.started_ms + kHourMs);
  EXPECT_NE(v.waiting_for.find("expected to start in about 50m (by run-time estimates)"),
            std::string::npos)
      << v.waiting_for;
  // Past its estimate, job a is expected to run as long again.
  clock_.Advance(kHourMs);
  service_->Tick();
  v = Get(head->job.id);
  ASSERT_TRUE(v.expected_start_ms.has_value());
  EXPECT_EQ(*v.expected_start_ms, a->job.started_ms + 2 * kHourMs);
}

TEST_F(ScheduleTest, AMaximumRunTimeIsAReservationByItsDeadline) {
  core::RequestFields f = Gpus("3");
  f.max_runtime = "20m";
  ASSERT_TRUE(SubmitAs(kUser, f).ok());
  auto head = SubmitAs(kUser, Gpus("1"));
  ASSERT_TRUE(head.ok());
  EXPECT_NE(Get(head->job.id).waiting_for.find("(by maximum run times)"), std::string::npos)
      << Get(head->job.id).waiting_for;
}

TEST_F(ScheduleTest, FairShareStartsTheUserWhoUsedLessFirst) {
  // u1000 has used all three GPUs for two hours; u2000 nothing.
  auto used = SubmitAs(kUser, Gpus("3"));
  ASSERT_TRUE(used.ok());
  Ticks(2);
  clock_.Advance(2 * kHourMs);
  Ticks(2);
  // Both queue a job behind it, u1000 first.
  auto mine = SubmitAs(kUser, Gpus("3"));
  clock_.Advance(1000);
  auto theirs = SubmitAs(2000, Gpus("3"));
  ASSERT_TRUE(mine.ok() && theirs.ok());
  Ticks(2);
  EXPECT_LT(Get(mine->job.id).fair_share, Get(theirs->job.id).fair_share);
  EXPECT_LT(Get(theirs->job.id).queue_position, Get(mine->job.id).queue_position);
  launcher_.Exit(Get(used->job.id).job.pid, 0);
  Ticks(2);
  EXPECT_EQ(State(theirs->job.id), JobState::kRunning);
  EXPECT_EQ(State(mine->job.id), JobState::kQueued);
}

TEST_F(ScheduleTest, WithFairShareOffTheQueueKeepsArrivalOrder) {
  options_.rules.fair_share.enabled = false;
  Restart();
  auto used = SubmitAs(kUser, Gpus("3"));
  ASSERT_TRUE(used.ok());
  clock_.Advance(2 * kHourMs);
  Ticks(2);
  auto mine = SubmitAs(kUser, Gpus("3"));
  clock_.Advance(1000);
  auto theirs = SubmitAs(2000, Gpus("3"));
  Ticks(2);
  EXPECT_EQ(Get(mine->job.id).queue_position, 1);
  EXPECT_LT(Get(mine->job.id).fair_share, 0) << "not shown while off";
}

TEST_F(ScheduleTest, FairShareIsReadBackFromTheLedgerAfterARestart) {
  auto used = SubmitAs(kUser, Gpus("3"));
  ASSERT_TRUE(used.ok());
  clock_.Advance(2 * kHourMs);
  Ticks(1);
  launcher_.Exit(Get(used->job.id).job.pid, 0);
  Ticks(2);
  Restart();
  auto blocker = SubmitAs(3000, Gpus("3"));
  auto mine = SubmitAs(kUser, Gpus("3"));
  auto theirs = SubmitAs(2000, Gpus("3"));
  ASSERT_TRUE(blocker.ok() && mine.ok() && theirs.ok());
  Ticks(2);
  EXPECT_LT(Get(mine->job.id).fair_share, Get(theirs->job.id).fair_share);
}

// The node: two fractions spread over two GPUs, a 2-GPU job first
// in line. The daemon moves one fraction beside the other and the head
// starts; the moved job says why.
TEST_F(ScheduleTest, TheDaemonMovesASuspendableJobSoThatTheHeadStarts) {
  options_.policy = core::Policy::kSpread;
  Restart();
  uint64_t a = WithCuda(SubmitAs(kUser, Mem("20GiB")), kCuda);
  uint64_t b = WithCuda(SubmitAs(kUser, Mem("20GiB")), kCuda + 1);
  ASSERT_NE(GpuOf(a), GpuOf(b));
  auto head = SubmitAs(2000, Gpus("2"));
  ASSERT_TRUE(head.ok());
  Ticks(3);
  EXPECT_EQ(State(head->job.id), JobState::kRunning) << Get(head->job.id).waiting_for;
  EXPECT_EQ(GpuOf(a), GpuOf(b));
  EXPECT_EQ(State(a), JobState::kRunning);
  EXPECT_EQ(State(b), JobState::kRunning);
  EXPECT_EQ(Count(a, "moved") + Count(b, "moved"), 1);
  const std::string why = Message(Count(a, "moved") ? a : b, "moved");
  EXPECT_NE(why.find("to let job " + std::to_string(head->job.id) + " (2 GPUs, first in line)"),
            std::string::npos)
      << why;
  EXPECT_TRUE(HasEvent(head->job.id, "defragmenting"));
}

// Jobs submitted just after the head do not pass it. A job is ranked as of
// the queue's last ranking, as the head was: ranked at its own later
// instant, a job that had waited a millisecond between its submission and
// its place in the queue outranked the head (ranked with no wait), started
// beside the notebook and took the GPU the head's reservation counted on.
// The clock moves on at every read here, as time passes on a busy machine.
TEST_F(ScheduleTest, JobsSubmittedJustAfterTheHeadDoNotPassItInTheQueue) {
  options_.policy = core::Policy::kSpread;
  options_.rules.defragment = DefragMode::kOff;
  Restart();
  core::RequestFields notebook = Mem("20GiB");
  notebook.max_runtime = "2m";
  uint64_t a = WithCuda(SubmitAs(kUser, notebook), kCuda);
  uint64_t b = WithCuda(SubmitAs(kUser, Mem("20GiB")), kCuda + 1);
  ASSERT_NE(GpuOf(a), GpuOf(b));
  auto head = SubmitAs(kUser, Gpus("2"));
  ASSERT_TRUE(head.ok());
  ASSERT_EQ(State(head->job.id), JobState::kQueued);
  clock_.set_step_ms(1);
  std::vector<uint64_t> array;
  for (int i = 0; i < 5; ++i) {
    auto v = SubmitAs(kUser, Mem("20GiB"));
    ASSERT_TRUE(v.ok());
    array.push_back(v->job.id);
  }
  clock_.set_step_ms(0);
  EXPECT_EQ(Get(head->job.id).queue_position, 1);
  // Backfilled only where they cannot delay the head: not beside the
  // notebook, whose GPU the head's reservation (its 2 minutes) counts on.
  for (uint64_t id : array) {
    if (State(id) == JobState::kRunning) {
      EXPECT_NE(GpuOf(id), GpuOf(a)) << "job " << id;
    }
  }
  ASSERT_EQ(service_->Cancel(TestCaller(kUser), a).ok(), true);
  service_->Tick();
  EXPECT_EQ(State(head->job.id), JobState::kRunning) << Get(head->job.id).waiting_for;
}

TEST_F(ScheduleTest, AJobWithoutACudaProcessIsNeverMoved) {
  options_.policy = core::Policy::kSpread;
  Restart();
  auto a = SubmitAs(kUser, Mem("20GiB"));  // No CUDA process in its slice.
  uint64_t b = WithCuda(SubmitAs(kUser, Mem("20GiB")), kCuda + 1);
  ASSERT_TRUE(a.ok());
  // b may move onto a's GPU; a never moves.
  auto head = SubmitAs(2000, Gpus("2"));
  Ticks(3);
  EXPECT_EQ(Count(a->job.id, "moved"), 0);
  EXPECT_EQ(Count(a->job.id, "suspended"), 0);
  EXPECT_EQ(Count(b, "moved"), 1);
  EXPECT_EQ(GpuOf(b), GpuOf(a->job.id));
  EXPECT_EQ(State(head->job.id), JobState::kRunning);
}

TEST_F(ScheduleTest, WithDefragmentSuggestTheHeadNamesTheMoveAndNothingMoves) {
  options_.policy = core::Policy::kSpread;
  options_.rules.defragment = DefragMode::kSuggest;
  Restart();
  uint64_t a = WithCuda(SubmitAs(kUser, Mem("20GiB")), kCuda);
  uint64_t b = WithCuda(SubmitAs(kUser, Mem("20GiB")), kCuda + 1);
  auto head = SubmitAs(2000, Gpus("2"));
  Ticks(3);
  EXPECT_EQ(State(head->job.id), JobState::kQueued);
  EXPECT_EQ(Count(a, "moved") + Count(b, "moved"), 0);
  EXPECT_FALSE(HasEvent(head->job.id, "defragmenting"));
  EXPECT_NE(Get(head->job.id).waiting_for.find("; a move would let it start: gpuslice move "),
            std::string::npos)
      << Get(head->job.id).waiting_for;
}

TEST_F(ScheduleTest, AJobIsMovedAutomaticallyAtMostTheHourlyLimit) {
  options_.policy = core::Policy::kSpread;
  options_.rules.defragment_moves_per_hour = 1;
  Restart();
  auto a = SubmitAs(kUser, Mem("20GiB"));  // Cannot be moved: b is the only candidate.
  uint64_t b = WithCuda(SubmitAs(kUser, Mem("20GiB")), kCuda + 1);
  auto first = SubmitAs(2000, Gpus("2"));
  Ticks(3);
  ASSERT_EQ(State(first->job.id), JobState::kRunning);
  ASSERT_EQ(Count(b, "moved"), 1);
  launcher_.Exit(Get(first->job.id).job.pid, 0);
  Ticks(1);
  // Its owner moves it away again (their own moves are not capped).
  const std::string away = GpuOf(a->job.id) == "GPU-2" ? "GPU-1" : "GPU-2";
  ASSERT_TRUE(service_->live().Move(TestCaller(kUser), b, away).ok());
  Ticks(2);
  ASSERT_EQ(GpuOf(b), away);
  // Within the hour the daemon does not move it a second time ...
  auto second = SubmitAs(2000, Gpus("2"));
  Ticks(3);
  EXPECT_EQ(State(second->job.id), JobState::kQueued);
  EXPECT_EQ(Count(b, "moved"), 2);
  // ... an hour after its first move, it does.
  clock_.Advance(kHourMs);
  Ticks(3);
  EXPECT_EQ(State(second->job.id), JobState::kRunning) << Get(second->job.id).waiting_for;
  EXPECT_EQ(Count(b, "moved"), 3);
}

TEST_F(ScheduleTest, FractionsArePackedWhileAWholeGpuJobWaits) {
  options_.policy = core::Policy::kSpread;
  options_.rules.defragment = DefragMode::kOff;
  Restart();
  auto a = SubmitAs(kUser, Mem("20GiB"));
  auto b = SubmitAs(kUser, Mem("20GiB"));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_NE(GpuOf(a->job.id), GpuOf(b->job.id)) << "spread, with nothing whole waiting";
  auto head = SubmitAs(2000, Gpus("2"));
  ASSERT_EQ(State(head->job.id), JobState::kQueued);
  auto c = SubmitAs(kUser, Mem("20GiB"));
  ASSERT_EQ(State(c->job.id), JobState::kRunning);
  // Beside a or b, never on the idle GPU the head needs.
  EXPECT_TRUE(GpuOf(c->job.id) == GpuOf(a->job.id) || GpuOf(c->job.id) == GpuOf(b->job.id));
}

TEST_F(ScheduleTest, ABorrowerIsSuspendedWhenAJobWithinItsGroupsQuotaNeedsTheRoom) {
  core::Quota one;
  one.gpus = 1;
  ASSERT_TRUE(service_->quotas().SetQuota(kAdmin, {core::PrincipalKind::kGroup, "ml"}, one).ok());
  ASSERT_TRUE(service_->quotas().SetQuota(kAdmin, {core::PrincipalKind::kGroup, "ops"}, one).ok());
  // ml (u1000) takes all three GPUs: one within its quota, two borrowed.
  std::vector<uint64_t> ml;
  for (int i = 0; i < 3; ++i) ml.push_back(WithCuda(SubmitAs(kUser, Gpus("1")), kCuda + i));
  Ticks(1);
  int borrowing = 0;
  for (uint64_t id : ml) {
    for (const std::string& f : Get(id).flags) borrowing += f == "borrowing";
  }
  EXPECT_EQ(borrowing, 2);
  // ops asks for its guaranteed GPU.
  auto ops = SubmitAs(2000, Gpus("1"));
  ASSERT_TRUE(ops.ok());
  Ticks(3);
  EXPECT_EQ(State(ops->job.id), JobState::kRunning) << Get(ops->job.id).waiting_for;
  int suspended = 0;
  uint64_t victim = 0;
  for (uint64_t id : ml) {
    if (State(id) == JobState::kSuspended) {
      ++suspended;
      victim = id;
    }
  }
  ASSERT_EQ(suspended, 1);
  EXPECT_TRUE(HasEvent(victim, "reclaimed"));
  EXPECT_TRUE(HasEvent(ops->job.id, "reclaiming"));
  EXPECT_TRUE(Get(victim).job.resume_when_fits);
  // A restart in the middle keeps it suspended; it comes back by itself
  // once ops is done, every job once.
  Restart();
  EXPECT_EQ(State(victim), JobState::kSuspended);
  launcher_.Exit(Get(ops->job.id).job.pid, 0);
  Ticks(3);
  EXPECT_EQ(State(victim), JobState::kRunning);
  for (uint64_t id : ml) EXPECT_EQ(Count(id, "started"), 1);
}

TEST_F(ScheduleTest, AJobThatCannotGiveCapacityBackWaitsForItsGroupsQuota) {
  core::Quota one;
  one.gpus = 1;
  ASSERT_TRUE(service_->quotas().SetQuota(kAdmin, {core::PrincipalKind::kGroup, "ml"}, one).ok());
  checkpointer_->available = core::UnimplementedError("no checkpoint API");
  auto first = SubmitAs(kUser, Gpus("1"));
  auto held = SubmitAs(kUser, Gpus("1"));
  auto restartable = SubmitAs(kUser, Gpus("1"), /*restartable=*/true);
  ASSERT_TRUE(first.ok() && held.ok() && restartable.ok());
  EXPECT_EQ(State(first->job.id), JobState::kRunning);
  EXPECT_EQ(State(held->job.id), JobState::kQueued);
  EXPECT_NE(Get(held->job.id).waiting_for.find("only a job that can give the capacity back"),
            std::string::npos)
      << Get(held->job.id).waiting_for;
  EXPECT_EQ(State(restartable->job.id), JobState::kRunning) << "a restartable job borrows";
}

TEST_F(ScheduleTest, ExemptJobsAreFlaggedIdleButNeverActedOn) {
  options_.rules.idle_after_ms = 2000;
  options_.rules.idle_action = IdleAction::kPause;
  options_.rules.idle_action_always = true;
  Restart();
  auto plain = SubmitAs(kUser, Mem("1GiB"));
  auto exempt = SubmitAs(kUser, Mem("1GiB"), false, /*no_idle_reclaim=*/true);
  core::RequestFields high = Mem("1GiB");
  high.priority = "high";
  auto urgent = SubmitAs(kUser, high);
  ASSERT_TRUE(plain.ok() && exempt.ok() && urgent.ok());
  Ticks(5);
  auto flags = [&](uint64_t id) {
    std::set<std::string> out;
    for (const std::string& f : Get(id).flags) out.insert(f);
    return out;
  };
  EXPECT_TRUE(flags(plain->job.id).count("paused"));
  for (uint64_t id : {exempt->job.id, urgent->job.id}) {
    EXPECT_TRUE(flags(id).count("idle")) << id;
    EXPECT_FALSE(flags(id).count("paused")) << id;
    EXPECT_FALSE(HasEvent(id, "idle_action")) << id;
  }
  EXPECT_NE(Message(exempt->job.id, "idle_flagged").find("--no-idle-reclaim"), std::string::npos);
  // idle_exempt_priority = none: high priority is acted on like any.
  options_.rules.idle_exempt_priority.reset();
  Restart();
  auto now_high = SubmitAs(kUser, high);
  Ticks(5);
  EXPECT_TRUE(flags(now_high->job.id).count("paused"));
}

TEST_F(ScheduleTest, AGpuModelPlacesOnlyThereAndOneTheNodeLacksIsRefused) {
  inventory_ = FakeInventory(SimulatedGpus(3));
  InventorySnapshot mixed = SimulatedGpus(3);
  mixed.gpus[2].model = "NVIDIA A100-SXM4-40GB";
  mixed.gpus[2].memory_total = 40 * kGiB;
  inventory_ = FakeInventory(mixed);
  Restart();
  core::RequestFields f = Mem("1GiB");
  f.gpu_model = "a100";
  auto a = SubmitAs(kUser, f);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(GpuOf(a->job.id), "GPU-2");
  f.gpu_model = "l4";
  auto none = SubmitAs(kUser, f);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("--gpu-model l4: no GPU of that model on this machine"),
            std::string::npos)
      << none.status().message();
  // The model survives a restart (ledger migration 11).
  Restart();
  EXPECT_EQ(Get(a->job.id).job.request.gpu_models, std::vector<std::string>{"a100"});
}

}  // namespace
}  // namespace gpuslice::daemon
