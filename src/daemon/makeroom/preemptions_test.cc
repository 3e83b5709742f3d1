#include "daemon/makeroom/preemptions.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/launch/checkpointer_fake.h"

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::JobState;
using core::Priority;

// One GPU of `units`; each job takes its units of it. The victims' end is
// checked on a clone, as the daemon's capacity is.
class UnitsModel : public core::CapacityModel {
 public:
  std::unique_ptr<core::CapacityModel> Clone() const override {
    return std::make_unique<UnitsModel>(*this);
  }
  core::FitResult TryPlace(uint64_t id) override {
    if (free < demand.at(id)) return core::FitResult::kNotNow;
    free -= demand.at(id);
    return core::FitResult::kPlaced;
  }
  void Release(uint64_t id) override {
    if (auto it = demand.find(id); it != demand.end() && placed.erase(id)) free += it->second;
  }
  bool Mirror(uint64_t, const core::CapacityModel&) override { return false; }
  void Run(uint64_t id, int units) {
    demand[id] = units;
    placed.insert(id);
    free -= units;
  }

  int free = 10;
  std::map<uint64_t, int> demand;
  std::set<uint64_t> placed;
};

struct Event {
  std::string kind;
  uint64_t job = 0;
  std::string message;
};

struct Ended {
  JobState then = JobState::kQueued;
  std::string reason;
  int64_t kill_at_ms = 0;
  bool hang_up = false;
};

// A job table as the component sees it, with what it asked the daemon to do.
class PreemptionsTest : public ::testing::Test {
 protected:
  PreemptionsTest() { rules_.preemption = *core::ParsePreemptionPolicy("lower"); }

  Preemptions Make(Checkpointer* checkpointer = nullptr) {
    return Preemptions(
        Preemptions::Jobs{
            .for_each_live =
                [this](const std::function<void(const LiveJob&)>& visit) {
                  for (const auto& [id, l] : live_) visit(l);
                },
            .live = [this](uint64_t id) -> std::optional<LiveJob> {
              auto it = live_.find(id);
              if (it == live_.end()) return std::nullopt;
              return it->second;
            },
            .job = [this](uint64_t id) -> const Job& { return jobs_.at(id); },
            .capacity = [this]() -> const core::CapacityModel& { return model_; },
            .suspend = [this](uint64_t id, const SuspendToMakeRoom& why) -> core::Status {
              suspended_[id] = why;
              return suspend_result_;
            },
            .end =
                [this](uint64_t id, JobState then, std::string reason, int64_t kill_at_ms,
                       bool hang_up) {
                  ended_[id] = {then, std::move(reason), kill_at_ms, hang_up};
                  live_.at(id).ending = true;
                },
            .record =
                [this](std::string kind, uint64_t id, std::string, std::string message) {
                  events_.push_back({std::move(kind), id, std::move(message)});
                },
        },
        Preemptions::Quotas{
            .borrowing = [this]() { return borrowing_; },
            .borrowers = [this]() -> const std::set<uint64_t>& { return borrowers_; },
            .guaranteed = [this](const Job& job) { return guaranteed_.count(job.id) > 0; },
            .whole_gpu_bytes = []() { return uint64_t{80} << 30; },
        },
        rules_, checkpointer, clock_);
  }

  // A running job of `units` on the GPU.
  Job& Run(uint64_t id, Priority priority, int units, bool restartable = false) {
    Job& job = jobs_[id];
    job.id = id;
    job.user = "u" + std::to_string(id);
    job.state = JobState::kRunning;
    job.request.kind = core::RequestKind::kWholeGpus;
    job.request.priority = priority;
    job.allocation.gpu_indices = {0};
    job.started_ms = clock_.NowMs() - 60'000;
    job.restartable = restartable;
    job.pid = 1000 + static_cast<int64_t>(id);
    live_[id] = LiveJob{.job = &job};
    model_.Run(id, units);
    return job;
  }
  // A queued job of `units` (the head).
  Job& Queue(uint64_t id, Priority priority, int units) {
    Job& job = jobs_[id];
    job.id = id;
    job.user = "head";
    job.state = JobState::kQueued;
    job.request.kind = core::RequestKind::kWholeGpus;
    job.request.priority = priority;
    model_.demand[id] = units;
    return job;
  }
  std::vector<std::string> Kinds() const {
    std::vector<std::string> out;
    for (const Event& e : events_) out.push_back(e.kind);
    return out;
  }

  FakeClock clock_;
  PolicyConfig rules_;
  UnitsModel model_;
  std::map<uint64_t, Job> jobs_;
  std::map<uint64_t, LiveJob> live_;
  std::map<uint64_t, SuspendToMakeRoom> suspended_;
  core::Status suspend_result_ = core::Status::Ok();
  std::map<uint64_t, Ended> ended_;
  std::vector<Event> events_;
  bool borrowing_ = true;
  std::set<uint64_t> borrowers_;
  std::set<uint64_t> guaranteed_;
};

TEST_F(PreemptionsTest, EndsTheCheapestLowerPriorityJobThatLetsTheHeadStartOnce) {
  rules_.preemption_grace_ms = 5000;
  Run(1, Priority::kLow, 6);
  Run(2, Priority::kLow, 4, /*restartable=*/true);
  Queue(3, Priority::kHigh, 5);
  Preemptions p = Make();
  p.Preempt(3);
  ASSERT_EQ(ended_.size(), 1u);
  ASSERT_TRUE(ended_.count(1));                     // Only job 1 alone makes 5 units free.
  EXPECT_EQ(ended_[1].then, JobState::kCancelled);  // Not restartable.
  EXPECT_EQ(ended_[1].reason, "preempted by job 3 (high priority)");
  EXPECT_EQ(ended_[1].kill_at_ms, clock_.NowMs() + 5000);
  EXPECT_TRUE(ended_[1].hang_up);
  EXPECT_EQ(Kinds(), (std::vector<std::string>{"preempted", "preempting"}));
  EXPECT_TRUE(p.Preempting(3));
  EXPECT_EQ(p.WaitingText(3), "; preempting job(s) 1");
  // While its victim ends, the head asks for no one else.
  events_.clear();
  p.Preempt(3);
  EXPECT_TRUE(events_.empty());
}

TEST_F(PreemptionsTest, SparesJobsOfTheHeadsPriorityExternalOnesAndThoseAlreadyEnding) {
  Run(1, Priority::kHigh, 4);
  Run(2, Priority::kLow, 3).mode = core::JobMode::kExternal;
  Run(3, Priority::kLow, 3);
  live_[3].ending = true;
  Queue(4, Priority::kHigh, 5);
  Preemptions p = Make();
  p.Preempt(4);
  EXPECT_TRUE(ended_.empty());
  EXPECT_TRUE(events_.empty());
  EXPECT_FALSE(p.Preempting(4));
}

TEST_F(PreemptionsTest, SaysWhyItCannotPreemptInTheHeadsReason) {
  Run(1, Priority::kLow, 2);
  Run(2, Priority::kHigh, 8);
  Queue(3, Priority::kHigh, 5);
  Preemptions p = Make();
  p.Preempt(3);
  EXPECT_TRUE(ended_.empty());
  EXPECT_EQ(p.WaitingText(3).rfind("; cannot preempt: ", 0), 0u) << p.WaitingText(3);
}

TEST_F(PreemptionsTest, SuspendsVictimsWhenTheDriverCanCheckpointAndEndsThoseItCannot) {
  FakeCheckpointer checkpointer;
  Run(1, Priority::kLow, 5);
  Run(2, Priority::kLow, 5);
  Queue(3, Priority::kHigh, 10);
  Preemptions p = Make(&checkpointer);
  suspend_result_ = core::FailedPreconditionError("no CUDA process");
  p.Preempt(3);
  // Both were asked to suspend, for job 3; neither could, so both end.
  ASSERT_EQ(suspended_.size(), 2u);
  EXPECT_EQ(suspended_[1].preempted_for, 3u);
  EXPECT_EQ(suspended_[1].by, "preemption by job 3 (high priority)");
  EXPECT_EQ(ended_.size(), 2u);
  EXPECT_EQ(Kinds(), (std::vector<std::string>{"suspend_failed", "preempted", "suspend_failed",
                                               "preempted", "preempting"}));
  EXPECT_EQ(events_.back().message.rfind("ending lower-priority job(s) ", 0), 0u);
}

TEST_F(PreemptionsTest, AHeadsPreemptionIsOverOnceItsVictimsNoLongerRun) {
  FakeCheckpointer checkpointer;
  Run(1, Priority::kLow, 6);
  Queue(2, Priority::kHigh, 5);
  Preemptions p = Make(&checkpointer);
  p.Preempt(2);
  ASSERT_EQ(suspended_.count(1), 1u);
  EXPECT_TRUE(ended_.empty());
  // Being suspended, it still holds its GPU.
  live_[1].checkpointing = true;
  p.Forget();
  EXPECT_TRUE(p.Preempting(2));
  // Suspended, it holds nothing: the head may preempt anew if it must.
  live_[1].checkpointing = false;
  jobs_[1].state = JobState::kSuspended;
  p.Forget();
  EXPECT_FALSE(p.Preempting(2));
  EXPECT_EQ(p.WaitingText(2), "");
}

TEST_F(PreemptionsTest, ReclaimsOnlyForAHeadWithinItsGroupsGuarantee) {
  Run(1, Priority::kNormal, 6, /*restartable=*/true);
  borrowers_ = {1};
  Queue(2, Priority::kNormal, 5);
  Preemptions p = Make();
  p.Reclaim(2);
  EXPECT_TRUE(ended_.empty());
  guaranteed_ = {2};
  borrowing_ = false;
  p.Reclaim(2);
  EXPECT_TRUE(ended_.empty());
  borrowing_ = true;
  p.Reclaim(2);
  ASSERT_EQ(ended_.count(1), 1u);
  EXPECT_EQ(ended_[1].then, JobState::kQueued);
  EXPECT_FALSE(ended_[1].hang_up);
  EXPECT_EQ(p.WaitingText(2), "; taking its group's quota back from job(s) 1");
  EXPECT_EQ(Kinds(), (std::vector<std::string>{"reclaimed", "reclaiming"}));
}

TEST_F(PreemptionsTest, ABorrowerThatCannotBeSuspendedRunsOnUnlessRestartable) {
  FakeCheckpointer checkpointer;
  Run(1, Priority::kNormal, 5);
  Run(2, Priority::kNormal, 5, /*restartable=*/true);
  borrowers_ = {1, 2};
  guaranteed_ = {3};
  Queue(3, Priority::kNormal, 10);
  suspend_result_ = core::FailedPreconditionError("no CUDA process");
  Preemptions p = Make(&checkpointer);
  p.Reclaim(3);
  EXPECT_EQ(suspended_.size(), 2u);
  EXPECT_EQ(suspended_[2].reclaimed_for, 3u);
  EXPECT_EQ(ended_.count(1), 0u);  // It runs on.
  EXPECT_EQ(ended_.count(2), 1u);  // Requeued.
  std::vector<std::string> failed;
  for (const Event& e : events_) {
    if (e.kind == "suspend_failed") failed.push_back(std::to_string(e.job) + ": " + e.message);
  }
  EXPECT_EQ(failed,
            (std::vector<std::string>{
                "2: reclaim for job 3 (within its group's quota): no CUDA process; requeued",
                "1: reclaim for job 3 (within its group's quota): no CUDA process; it runs "
                "on"}));
}

TEST_F(PreemptionsTest, OnlyARestartableOrSuspendableJobBorrows) {
  FakeCheckpointer checkpointer;
  Job job;
  job.restartable = true;
  EXPECT_TRUE(Make().Borrowable(job));
  job.restartable = false;
  EXPECT_FALSE(Make().Borrowable(job));  // No checkpoint API.
  EXPECT_TRUE(Make(&checkpointer).Borrowable(job));
  job.image = "docker.io/library/ubuntu";
  EXPECT_FALSE(Make(&checkpointer).Borrowable(job));
  job.image.clear();
  job.mode = core::JobMode::kExternal;
  EXPECT_FALSE(Make(&checkpointer).Borrowable(job));
  job.mode = core::JobMode::kSubmit;
  checkpointer.available = core::UnimplementedError("no driver");
  EXPECT_FALSE(Make(&checkpointer).Borrowable(job));
}

}  // namespace
}  // namespace gpuslice::daemon
