#include "daemon/ranking/queue_ranker.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::JobState;

constexpr int64_t kHour = 3600 * 1000;
// A gid no system names: its group's name is the number.
constexpr uint32_t kGid = 3'999'001;

// The daemon's state the ranker reads, by hand.
class QueueRankerTest : public ::testing::Test {
 protected:
  QueueRankerTest() { Reset(core::FairShareConfig{}, core::RuntimeEstimates{}); }

  void Reset(core::FairShareConfig fair_share, core::RuntimeEstimates estimates) {
    ranker_ = std::make_unique<QueueRanker>(
        std::move(fair_share), std::move(estimates), clock_,
        QueueRanker::Hooks{
            .job = [this](uint64_t id) -> const Job& { return jobs_.at(id); },
            .for_each_live =
                [this](const std::function<void(const Job&)>& visit) {
                  for (uint64_t id : live_) visit(jobs_.at(id));
                },
            .live = [this](uint64_t id) { return live_.count(id) > 0; },
            .queue = [this]() -> std::vector<core::QueuedJob>& { return queue_; },
            .resume_asked_ms =
                [this](uint64_t id) {
                  auto it = resume_asked_.find(id);
                  return it == resume_asked_.end() ? int64_t{0} : it->second;
                },
            .waits_for_dependencies = [this](uint64_t id) { return waiting_.count(id) > 0; },
            .gpu_memory = [](uint32_t) { return uint64_t{80} << 30; },
            .default_pool = [this] { return default_pool_; },
            .pack_fractions = [this](bool pack) { packed_ = pack; },
        });
  }

  Job& AddJob(uint64_t id, const std::string& user, JobState state) {
    Job& job = jobs_[id];
    job.id = id;
    job.user = user;
    job.gid = kGid;
    job.state = state;
    job.submitted_ms = clock_.NowMs();
    return job;
  }
  void Enqueue(uint64_t id) {
    core::QueuedJob q;
    q.id = id;
    q.seq = id;
    q.rank = ranker_->RankOfArrival(jobs_.at(id));
    queue_.push_back(q);
  }
  std::vector<uint64_t> Order() const {
    std::vector<uint64_t> ids;
    for (const core::QueuedJob& q : queue_) ids.push_back(q.id);
    return ids;
  }
  // A history of `user` holding one whole GPU for the last `ms`.
  QueueRanker::History HeldWholeGpu(const std::string& user, int64_t ms) {
    return [user, ms](int64_t, int64_t now_ms) -> core::Result<std::vector<core::UsageRecord>> {
      core::UsageRecord r;
      r.user = user;
      r.gid = kGid;
      r.whole_gpu = true;
      r.allocated_ms = now_ms - ms;
      r.released_ms = now_ms;
      return std::vector<core::UsageRecord>{r};
    };
  }

  FakeClock clock_;
  std::map<uint64_t, Job> jobs_;
  std::set<uint64_t> live_;
  std::vector<core::QueuedJob> queue_;
  std::map<uint64_t, int64_t> resume_asked_;
  std::set<uint64_t> waiting_;
  std::string default_pool_;
  bool packed_ = false;
  std::unique_ptr<QueueRanker> ranker_;
};

TEST_F(QueueRankerTest, TheUserWhoUsedLessInTheLedgersHistoryGoesFirst) {
  ranker_->Seed(HeldWholeGpu("alice", 10 * kHour));
  AddJob(1, "alice", JobState::kQueued);
  AddJob(2, "bob", JobState::kQueued);
  Enqueue(1);
  Enqueue(2);
  ranker_->Rerank(/*force=*/true);
  EXPECT_EQ(Order(), (std::vector<uint64_t>{2, 1}));
  ASSERT_TRUE(ranker_->ShownFactorOf(jobs_.at(1)).has_value());
  EXPECT_LT(*ranker_->ShownFactorOf(jobs_.at(1)), *ranker_->ShownFactorOf(jobs_.at(2)));
}

TEST_F(QueueRankerTest, AHistoryThatCannotBeReadLeavesEveryoneEqual) {
  ranker_->Seed([](int64_t, int64_t) -> core::Result<std::vector<core::UsageRecord>> {
    return core::UnavailableError("ledger locked");
  });
  AddJob(1, "alice", JobState::kQueued);
  AddJob(2, "bob", JobState::kQueued);
  Enqueue(1);
  Enqueue(2);
  ranker_->Rerank(/*force=*/true);
  EXPECT_EQ(Order(), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(ranker_->ShownFactorOf(jobs_.at(1)), ranker_->ShownFactorOf(jobs_.at(2)));
}

TEST_F(QueueRankerTest, ARunningJobsUseIsChargedToItsUser) {
  ranker_->Seed(nullptr);
  Job& running = AddJob(1, "alice", JobState::kRunning);
  running.started_ms = clock_.NowMs();
  running.request.kind = core::RequestKind::kWholeGpus;
  running.request.gpus_min = running.request.gpus_max = 1;
  running.allocation.gpu_indices = {0};
  live_.insert(1);
  ranker_->Rerank(/*force=*/true);
  clock_.Advance(2 * kHour);
  AddJob(2, "alice", JobState::kQueued);
  AddJob(3, "bob", JobState::kQueued);
  Enqueue(2);
  Enqueue(3);
  ranker_->Rerank(/*force=*/true);
  EXPECT_EQ(Order(), (std::vector<uint64_t>{3, 2}));
}

TEST_F(QueueRankerTest, TheQueueIsRankedAgainAtMostOnceASecondUnlessForced) {
  ranker_->Seed(nullptr);
  AddJob(1, "alice", JobState::kQueued);
  Enqueue(1);
  ranker_->Rerank(/*force=*/true);
  queue_[0].rank = -1;
  clock_.Advance(FairShareBook::kRankEveryMs - 1);
  ranker_->Rerank(/*force=*/false);
  EXPECT_EQ(queue_[0].rank, -1) << "not due yet";
  clock_.Advance(1);
  ranker_->Rerank(/*force=*/false);
  EXPECT_NE(queue_[0].rank, -1);
}

TEST_F(QueueRankerTest, ASuspendedJobsAgeCountsFromWhenItAskedToResume) {
  ranker_->Seed(nullptr);
  Job& queued = AddJob(1, "alice", JobState::kQueued);
  Job& suspended = AddJob(2, "alice", JobState::kSuspended);
  const int64_t now = clock_.NowMs() + 2 * kHour;
  resume_asked_[2] = now - 1000;
  EXPECT_GT(ranker_->RankOf(queued, now), ranker_->RankOf(suspended, now));
  resume_asked_.erase(2);
  EXPECT_EQ(ranker_->RankOf(queued, now), ranker_->RankOf(suspended, now))
      << "not asked: from its submission";
}

TEST_F(QueueRankerTest, NoFactorIsShownWhileFairShareIsOff) {
  core::FairShareConfig off;
  off.enabled = false;
  Reset(off, core::RuntimeEstimates{});
  ranker_->Seed(HeldWholeGpu("alice", kHour));
  AddJob(1, "alice", JobState::kQueued);
  Enqueue(1);
  ranker_->Rerank(/*force=*/true);
  EXPECT_FALSE(ranker_->ShownFactorOf(jobs_.at(1)).has_value());
}

TEST_F(QueueRankerTest, AJobWithAMaximumRunTimeHasNoEstimate) {
  Job& job = AddJob(1, "alice", JobState::kQueued);
  EXPECT_EQ(ranker_->EstimateOf(job), core::RuntimeEstimates::kDefault);
  job.request.max_runtime = std::chrono::minutes(5);
  EXPECT_FALSE(ranker_->EstimateOf(job).has_value());
}

TEST_F(QueueRankerTest, AJobWithoutAPoolIsEstimatedAsOneOfTheDefaultPool) {
  core::RuntimeEstimates estimates;
  bool known = false;
  ASSERT_TRUE(estimates.Apply("default_runtime.pool.inference", "10m", &known).ok());
  ASSERT_TRUE(known);
  Reset(core::FairShareConfig{}, estimates);
  Job& job = AddJob(1, "alice", JobState::kQueued);
  EXPECT_EQ(ranker_->EstimateOf(job), core::RuntimeEstimates::kDefault);
  default_pool_ = "inference";
  EXPECT_EQ(ranker_->EstimateOf(job), std::chrono::minutes(10));
}

TEST_F(QueueRankerTest, ARunningJobIsExpectedToEndByItsEstimateLessTheTimeItRan) {
  Job& job = AddJob(1, "alice", JobState::kRunning);
  const int64_t now = clock_.NowMs();
  job.started_ms = now - 40 * 60 * 1000;
  job.suspended_total_ms = 10 * 60 * 1000;  // Ran 30 minutes of its hour.
  core::RunningJob entry = ranker_->PlanEntryOf(job, now);
  EXPECT_FALSE(entry.ends_at_ms.has_value());
  EXPECT_EQ(entry.expected_end_ms, now + 30 * 60 * 1000);

  job.request.max_runtime = std::chrono::hours(2);
  entry = ranker_->PlanEntryOf(job, now);
  EXPECT_EQ(entry.ends_at_ms, job.DeadlineMs());
  EXPECT_FALSE(entry.expected_end_ms.has_value()) << "its deadline says when";
}

TEST_F(QueueRankerTest, FractionsArePackedOnlyWhileAJobOfWholeGpusWaitsUnheld) {
  AddJob(1, "alice", JobState::kQueued);
  Enqueue(1);
  ranker_->UpdatePacking();
  EXPECT_FALSE(packed_) << "only fractions wait";

  AddJob(2, "bob", JobState::kQueued).request.kind = core::RequestKind::kWholeGpus;
  Enqueue(2);
  waiting_.insert(2);
  ranker_->UpdatePacking();
  EXPECT_FALSE(packed_) << "it waits for its dependencies";

  waiting_.clear();
  ranker_->UpdatePacking();
  EXPECT_TRUE(packed_);
}

TEST_F(QueueRankerTest, TheHeadsReservationIsKeptUntilCleared) {
  EXPECT_FALSE(ranker_->head_expected_start_ms().has_value());
  ranker_->SetReservation(5000, /*estimated=*/true);
  EXPECT_EQ(ranker_->head_expected_start_ms(), 5000);
  EXPECT_TRUE(ranker_->head_estimated());
  ranker_->ClearReservation();
  EXPECT_FALSE(ranker_->head_expected_start_ms().has_value());
}

TEST_F(QueueRankerTest, AGroupWithoutANameIsNamedByItsGid) {
  EXPECT_EQ(ranker_->GroupNameOf(kGid), std::to_string(kGid));
}

}  // namespace
}  // namespace gpuslice::daemon
