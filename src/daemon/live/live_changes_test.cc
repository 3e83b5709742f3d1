#include "daemon/live/live_changes.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/units.h"
#include "daemon/launch/checkpointer_fake.h"
#include "daemon/table/job_transitions_fake.h"

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::JobState;

// LiveChanges over a job table of its own, two A100s in pool "default" and
// an H100 in pool "big", a real Suspender over the fake driver and slices,
// a real QuotaKeeper; the other parts' answers are recorded by the hooks.
class LiveChangesTest : public ::testing::Test {
 protected:
  LiveChangesTest() {
    for (uint32_t i = 0; i < 3; ++i) {
      GpuInfo g;
      g.index = i;
      g.uuid = "GPU-" + std::to_string(i);
      g.model = i < 2 ? "A100" : "H100";
      g.memory_total = 40 * core::kGiB;
      inventory_.gpus.push_back(g);
      pools_[i] = i < 2 ? "default" : "big";
    }
    auto capacity = NodeCapacity::Create(inventory_.gpus, core::Policy::kBinpack);
    capacity_ = std::move(*capacity);
    checkpointer_ = std::make_shared<FakeCheckpointer>();
  }

  // Builds the parts; `checkpoint`: whether the driver can checkpoint.
  void Make(bool checkpoint = true) {
    suspender_ = std::make_unique<Suspender>(
        Suspender::Jobs{
            .live = [this](uint64_t id) -> Job* {
              return table_.live().count(id) ? &table_.jobs()[id] : nullptr;
            },
            .ending = [](uint64_t) { return false; },
            .stopped = [](uint64_t) { return false; },
            .change_state =
                [this](Job& job, JobState to, std::string kind, std::string message) {
                  return transitions_.ChangeState(job, to, std::move(kind), std::move(message));
                },
            .persist = [](const Job&) {},
            .record_event =
                [this](std::string kind, uint64_t id, std::string user, std::string message) {
                  transitions_.RecordEvent(std::move(kind), id, std::move(user),
                                           std::move(message));
                },
            .limits_of = [this](const Job& job) { return LimitsOf(job); },
            .capacity = [this] { return capacity_.get(); },
            .degraded_reason = [] { return std::string(); },
            .inventory = [this]() -> const InventorySnapshot& { return inventory_; },
            .pool_of = [this](uint32_t gpu) -> const std::string& { return pools_.at(gpu); },
            .usage = [](uint64_t) -> const JobUsage* { return nullptr; },
            .forget_usage = [](uint64_t) {},
            .processes = [this]() -> ProcessTable& { return procs_; },
            .append_to_stderr = [](const Job&, const std::string&) {},
            .suspend_failed =
                [this](Job& job, const SuspendCause& cause) {
                  live_->AfterFailedSuspend(job, cause);
                },
            .resumed = [](uint64_t) {},
            .resume_on_demand = [] { return false; },
            .suspended = [] { return std::vector<Job*>(); },
            .enqueue = [](const Job&, int64_t) {},
            .dequeue = [](uint64_t) {},
            .may_resume = [](const Job&) { return true; },
            .request_schedule = [this] { transitions_.RequestSchedule(); },
        },
        clock_, regions_, checkpoint ? checkpointer_ : nullptr, 1000);
    quotas_ = std::make_unique<QuotaKeeper>(
        QuotaKeeper::Jobs{
            .for_each_charged =
                [this](const std::function<void(const Job&)>& visit) {
                  for (const auto& [id, l] : table_.live()) visit(table_.jobs()[id]);
                },
            .job = [this](uint64_t id) -> const Job& { return table_.jobs()[id]; },
            .placed = [this](uint64_t id) { return capacity_->AllocationOf(id); },
            .borrowable = [](const Job&) { return false; },
            .groups_of = [](const std::string&, uint32_t) { return std::vector<std::string>(); },
        },
        false);
    live_ = std::make_unique<LiveChanges>(
        table_, *suspender_, *quotas_, regions_, transitions_, rules_, clock_,
        LiveChanges::Hooks{
            .view =
                [](const Job& job) {
                  JobView v;
                  v.job = job;
                  return v;
                },
            .change_priority =
                [this](const Caller&, Job& job, core::Priority priority) {
                  job.request.priority = priority;
                  ++priority_changes_;
                  return core::Status::Ok();
                },
            .limits_of = [this](const Job& job) { return LimitsOf(job); },
            .take_turns = [](const Job&, SliceLimits*) {},
            .capacity = [this] { return capacity_.get(); },
            .inventory = [this]() -> const InventorySnapshot& { return inventory_; },
            .pool_of = [this](uint32_t gpu) -> const std::string& { return pools_.at(gpu); },
            .degraded = [] { return false; },
            .degraded_reason = [] { return std::string(); },
            .save_resize = [this](const Job& job) { resized_.push_back(job.id); },
            .resize_elastic = [](Job&, uint32_t, const std::string&) { return core::Status::Ok(); },
            .unpaused = [this](uint64_t id) { unpaused_.insert(id); },
            .idle_fallback =
                [this](Job& job, IdleAction action, const std::string&) {
                  fallbacks_.push_back("idle " + std::string(IdleActionName(action)) + " " +
                                       std::to_string(job.id));
                },
            .end_for_preemption =
                [this](Job& job, uint64_t head) {
                  fallbacks_.push_back("end " + std::to_string(job.id) + " for " +
                                       std::to_string(head));
                },
            .requeue_for_reclaim =
                [this](Job& job, uint64_t head) {
                  fallbacks_.push_back("requeue " + std::to_string(job.id) + " for " +
                                       std::to_string(head));
                },
            .move_failed =
                [this](uint64_t id, int64_t) {
                  fallbacks_.push_back("no move of " + std::to_string(id));
                },
        });
  }

  static SliceLimits LimitsOf(const Job& job) {
    SliceLimits limits;
    limits.job_id = job.id;
    limits.uuids = job.allocation.gpu_uuids;
    limits.memory_bytes_per_device = job.request.memory_bytes;
    limits.launches_paused = job.state == JobState::kSuspended;
    return limits;
  }

  // A running job of alice's (uid 1000) on GPU `gpu`: a whole GPU, or
  // `memory` of it; with CUDA process `pid`.
  Job& Running(uint64_t id, uint32_t gpu, uint64_t memory = 0, int64_t pid = 0) {
    Job job;
    job.id = id;
    job.uid = 1000;
    job.user = "alice";
    job.state = JobState::kRunning;
    if (memory == 0) {
      job.request.kind = core::RequestKind::kWholeGpus;
      job.request.gpus_min = job.request.gpus_max = 1;
    } else {
      job.request.kind = core::RequestKind::kFraction;
      job.request.memory_bytes = memory;
    }
    EXPECT_TRUE(capacity_->SetDemand(id, job.request).ok());
    EXPECT_TRUE(capacity_->PlaceOn(id, {"GPU-" + std::to_string(gpu)}).ok());
    job.allocation = *capacity_->AllocationOf(id);
    job.region_path = *regions_.Create(LimitsOf(job));
    if (pid > 0) {
      regions_.pids[job.region_path] = {static_cast<int32_t>(pid)};
      procs_.owners[pid] = ProcessOwner{1000, 1000, "alice", {}};
      checkpointer_->Set(pid, GpuProcessState::kRunning);
    }
    table_.live()[id];
    return table_.jobs()[id] = job;
  }

  void WaitFor(uint64_t id) {
    for (int i = 0; i < 5000 && suspender_->Busy(id); ++i) {
      suspender_->Finish();
      if (suspender_->Busy(id)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_FALSE(suspender_->Busy(id));
  }

  static ResizeSpec Mem(std::string mem, bool force = false) {
    ResizeSpec spec;
    spec.mem = std::move(mem);
    spec.force = force;
    return spec;
  }

  static Caller CallerOf(uint32_t uid, std::string user) {
    Caller caller;
    caller.uid = caller.gid = uid;
    caller.user = std::move(user);
    return caller;
  }
  static core::Quota MemoryQuota(uint64_t bytes) {
    core::Quota quota;
    quota.memory_bytes = bytes;
    return quota;
  }

  const Caller alice_ = CallerOf(1000, "alice");
  FakeClock clock_;
  FakeRegionStore regions_;
  FakeProcessTable procs_;
  InventorySnapshot inventory_;
  std::map<uint32_t, std::string> pools_;
  PolicyConfig rules_;
  std::unique_ptr<NodeCapacity> capacity_;
  std::shared_ptr<FakeCheckpointer> checkpointer_;
  JobTable table_;
  FakeTransitions transitions_;
  std::unique_ptr<Suspender> suspender_;
  std::unique_ptr<QuotaKeeper> quotas_;
  std::unique_ptr<LiveChanges> live_;
  std::vector<uint64_t> resized_;
  std::set<uint64_t> unpaused_;
  std::vector<std::string> fallbacks_;
  int priority_changes_ = 0;
};

TEST_F(LiveChangesTest, AResizeWithinTheQuotaChangesTheSliceTheJobAndTheLedger) {
  Make();
  quotas_->Set({core::PrincipalKind::kUser, "alice"}, MemoryQuota(16 * core::kGiB));
  Job& job = Running(1, 0, 8 * core::kGiB);
  auto v = live_->Resize(alice_, 1, Mem("12G"));
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(job.request.memory_bytes, 12 * core::kGiB);
  EXPECT_EQ(job.allocation.memory_bytes_per_gpu, 12 * core::kGiB);
  EXPECT_EQ(regions_.regions[job.region_path].memory_bytes_per_device, 12 * core::kGiB);
  EXPECT_EQ(resized_, std::vector<uint64_t>{1});
  ASSERT_FALSE(transitions_.events.empty());
  EXPECT_EQ(transitions_.events.back().kind, "resized");
  EXPECT_NE(transitions_.events.back().message.find("by alice"), std::string::npos);
  EXPECT_EQ(transitions_.plans(), 1);  // A smaller or larger job: the queue is planned again.
}

TEST_F(LiveChangesTest, AResizeAboveTheQuotaIsRefusedAndChangesNothing) {
  Make();
  quotas_->Set({core::PrincipalKind::kUser, "alice"}, MemoryQuota(16 * core::kGiB));
  Job& job = Running(1, 0, 8 * core::kGiB);
  auto v = live_->Resize(alice_, 1, Mem("20G"));
  ASSERT_EQ(v.status().code(), core::StatusCode::kResourceExhausted);
  EXPECT_NE(v.status().message().find("is over quota"), std::string::npos) << v.status().message();
  EXPECT_EQ(job.request.memory_bytes, 8 * core::kGiB);
  EXPECT_TRUE(resized_.empty());
  EXPECT_TRUE(transitions_.events.empty());
}

TEST_F(LiveChangesTest, AResizeBelowTheMemoryInUseNeedsForce) {
  Make();
  Job& job = Running(1, 0, 8 * core::kGiB);
  regions_.used[job.region_path] = 6 * core::kGiB;
  auto refused = live_->Resize(alice_, 1, Mem("4G"));
  ASSERT_EQ(refused.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("--force"), std::string::npos);
  EXPECT_EQ(job.request.memory_bytes, 8 * core::kGiB);

  ASSERT_TRUE(live_->Resize(alice_, 1, Mem("4G", /*force=*/true)).ok());
  EXPECT_EQ(job.request.memory_bytes, 4 * core::kGiB);
  EXPECT_NE(transitions_.events.back().message.find("forced below"), std::string::npos)
      << transitions_.events.back().message;
}

TEST_F(LiveChangesTest, APriorityAloneIsAskedOfWhoOwnsPriorities) {
  Make();
  Job& job = Running(1, 0, 8 * core::kGiB);
  ResizeSpec spec;
  spec.priority = "high";
  ASSERT_TRUE(live_->Resize(alice_, 1, spec).ok());
  EXPECT_EQ(priority_changes_, 1);
  EXPECT_EQ(job.request.priority, core::Priority::kHigh);
  EXPECT_TRUE(resized_.empty());
}

TEST_F(LiveChangesTest, AnotherUsersJobIsNeitherResizedNorSuspended) {
  Make();
  Running(1, 0, 8 * core::kGiB);
  const Caller bob = CallerOf(1001, "bob");
  EXPECT_EQ(live_->Resize(bob, 1, Mem("4G")).status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_EQ(live_->Suspend(bob, 1).code(), core::StatusCode::kPermissionDenied);
}

TEST_F(LiveChangesTest, SuspendIsRefusedWithoutTheCheckpointApi) {
  Make(/*checkpoint=*/false);
  Job& job = Running(1, 0, 0, 5001);
  core::Status s = live_->Suspend(alice_, 1);
  EXPECT_EQ(s.code(), core::StatusCode::kUnimplemented) << s.message();
  EXPECT_EQ(job.state, JobState::kRunning);
}

TEST_F(LiveChangesTest, OnlyARunningJobIsSuspended) {
  Make();
  Job& job = Running(1, 0, 0, 5001);
  job.state = JobState::kQueued;
  core::Status s = live_->Suspend(alice_, 1);
  EXPECT_EQ(s.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("only a running job can be suspended"), std::string::npos);
  EXPECT_EQ(live_->Suspend(alice_, 9).code(), core::StatusCode::kNotFound);
}

TEST_F(LiveChangesTest, ResumeWithoutRoomOnItsGpusIsRefusedNamingThem) {
  Make();
  Job& job = Running(1, 0, 0, 5001);
  ASSERT_TRUE(live_->Suspend(alice_, 1).ok());
  WaitFor(1);
  ASSERT_EQ(job.state, JobState::kSuspended);
  Running(2, 0);  // Take GPU-0 while job 1 is suspended, and the other A100.
  Running(3, 1);
  core::Status s = live_->Resume(alice_, 1);
  ASSERT_EQ(s.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("its GPUs (GPU-0) lack room for its slice"), std::string::npos)
      << s.message();
  EXPECT_EQ(job.state, JobState::kSuspended);
}

TEST_F(LiveChangesTest, ResumeOfAPausedJobLetsItLaunchAgain) {
  Make();
  Job& job = Running(1, 0, 8 * core::kGiB);
  EXPECT_EQ(live_->Resume(alice_, 1).code(), core::StatusCode::kFailedPrecondition);  // Not paused.
  table_.live()[1].paused = true;
  regions_.regions[job.region_path].launches_paused = true;
  ASSERT_TRUE(live_->Resume(alice_, 1).ok());
  EXPECT_FALSE(table_.live()[1].paused);
  EXPECT_FALSE(regions_.regions[job.region_path].launches_paused);
  EXPECT_EQ(unpaused_, std::set<uint64_t>{1});
  EXPECT_EQ(transitions_.events.back().kind, "resumed");
}

TEST_F(LiveChangesTest, AMoveToAGpuOfAnotherModelOrPoolIsRefused) {
  Make();
  Running(1, 0, 0, 5001);
  core::Status s = live_->Move(alice_, 1, "GPU-2");
  ASSERT_EQ(s.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("cannot move to GPU-2 (H100, pool big)"), std::string::npos)
      << s.message();
  EXPECT_EQ(live_->Move(alice_, 1, "GPU-9").code(), core::StatusCode::kNotFound);
  EXPECT_EQ(live_->Move(alice_, 1, "GPU-0").code(), core::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(suspender_->Busy(1));
}

TEST_F(LiveChangesTest, AMoveToAGpuWithoutRoomIsRefusedBeforeAnythingIsSuspended) {
  Make();
  Running(1, 0, 0, 5001);
  Running(2, 1);
  core::Status s = live_->Move(alice_, 1, "GPU-1");
  ASSERT_EQ(s.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("job 1 cannot move to GPU-1: "), std::string::npos) << s.message();
  EXPECT_FALSE(suspender_->Busy(1));
}

TEST_F(LiveChangesTest, AFailedSuspensionFallsBackByItsCause) {
  Make();
  Job& job = Running(1, 0, 0, 5001);
  Running(2, 1);
  job.restartable = true;

  SuspendCause idle;
  idle.idle_fallback = IdleAction::kPause;
  live_->AfterFailedSuspend(job, idle);
  SuspendCause preempted;
  preempted.preempted_for = 2;
  live_->AfterFailedSuspend(job, preempted);
  SuspendCause gone_head;  // The job it was preempted for is gone: it runs on.
  gone_head.preempted_for = 7;
  live_->AfterFailedSuspend(job, gone_head);
  SuspendCause reclaimed;
  reclaimed.reclaimed_for = 2;
  live_->AfterFailedSuspend(job, reclaimed);
  SuspendCause defrag;
  defrag.defrag_for = 2;
  live_->AfterFailedSuspend(job, defrag);
  job.restartable = false;  // Not restartable: a reclaim leaves it running.
  live_->AfterFailedSuspend(job, reclaimed);

  EXPECT_EQ(fallbacks_, (std::vector<std::string>{"idle pause 1", "end 1 for 2", "requeue 1 for 2",
                                                  "no move of 1"}));
}

}  // namespace
}  // namespace gpuslice::daemon
