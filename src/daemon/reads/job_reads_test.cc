#include "daemon/reads/job_reads.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::JobState;
using core::WaitingJob;
using core::WaitReason;

Job MakeJob(uint64_t id, const std::string& user, uint32_t uid, JobState state) {
  Job job;
  job.id = id;
  job.user = user;
  job.uid = uid;
  job.state = state;
  return job;
}

Caller CallerOf(const std::string& user, uint32_t uid, bool admin = false) {
  Caller c;
  c.user = user;
  c.uid = uid;
  c.admin = admin;
  return c;
}

// JobReads over a job table and answers the test sets, as the components
// behind Service would give them.
class JobReadsTest : public ::testing::Test {
 protected:
  JobReadsTest() : reads_(table_, clock_, dir_, default_pool_, Sources()) {}

  JobReads::Jobs Sources() {
    return JobReads::Jobs{
        .flush = [this] { ++flushes_; },
        .transitions = [](uint64_t id) -> core::Result<std::vector<Transition>> {
          return core::UnavailableError("ledger unavailable: no ledger for job " +
                                        std::to_string(id));
        },
        .pool_of = [this](uint32_t gpu) -> const std::string& {
          auto it = pools_.find(gpu);
          return it == pools_.end() ? default_pool_ : it->second;
        },
        .suspend_flags = [](uint64_t) { return std::vector<std::string>{}; },
        .idle = [this](uint64_t id) { return idle_.count(id) > 0; },
        .watchdog_flags = [](uint64_t, std::vector<std::string>*) {},
        .borrowing = [](uint64_t) { return false; },
        .dependencies = [](const Job&) { return std::vector<DependencyView>{}; },
        .usage = [](uint64_t) { return std::optional<JobUsage>(); },
        .checkpoint_error = [](uint64_t) { return std::string(); },
        .fair_share = [](const Job&) { return std::optional<double>(); },
        .resume_asked_ms = [](uint64_t) { return int64_t(0); },
        .why_not_now = [](uint64_t id) { return "no room for job " + std::to_string(id); },
        .preempt_text = [](uint64_t) { return std::string(); },
        .head_start = [this] { return head_start_; },
        .defrag_text = [](uint64_t) { return std::string(); },
        .borrow_reason = [](uint64_t) -> const std::string* { return nullptr; },
        .quota_wait = [this](uint64_t) -> const std::string* { return &quota_reason_; },
        .waits_for_dependencies = [](uint64_t) { return false; },
        .dependency_text = [](const Job&) { return std::string(); },
    };
  }

  Job& Add(uint64_t id, JobState state, const std::string& user = "alice", uint32_t uid = 1000) {
    return table_.Add(MakeJob(id, user, uid, state));
  }

  JobTable table_;
  FakeClock clock_{1'000'000};
  std::string dir_ = ::testing::TempDir() + "/job_reads_jobs";
  std::string default_pool_ = "default";
  std::map<uint32_t, std::string> pools_;
  std::set<uint64_t> idle_;
  std::optional<JobReads::HeadStart> head_start_;
  std::string quota_reason_ = "bob's group is at its limit";
  int flushes_ = 0;
  JobReads reads_;
};

TEST_F(JobReadsTest, AQueuedJobsViewNamesItsPlaceAndReasonFromThePublishedPlan) {
  Add(1, JobState::kQueued);
  Add(2, JobState::kQueued);
  reads_.SetPlan({WaitingJob{1, 1, WaitReason::kHead}, WaitingJob{2, 2, WaitReason::kBehindHead}},
                 1);
  JobView head = reads_.View(table_.jobs().at(1));
  EXPECT_EQ(head.queue_position, 1);
  EXPECT_EQ(head.waiting_for, "first in line: no room for job 1");
  JobView second = reads_.View(table_.jobs().at(2));
  EXPECT_EQ(second.queue_position, 2);
  EXPECT_EQ(second.waiting_for, "behind job 1: no room for job 2");
}

TEST_F(JobReadsTest, TheHeadsViewSaysWhenItIsExpectedToStart) {
  Add(1, JobState::kQueued);
  head_start_ = JobReads::HeadStart{clock_.NowMs() + 25 * 60'000, true};
  reads_.SetPlan({WaitingJob{1, 1, WaitReason::kHead}}, 1);
  JobView v = reads_.View(table_.jobs().at(1));
  ASSERT_TRUE(v.expected_start_ms.has_value());
  EXPECT_EQ(*v.expected_start_ms, head_start_->start_ms);
  EXPECT_EQ(v.waiting_for,
            "first in line: no room for job 1; expected to start in about 25m (by run-time "
            "estimates)");
}

TEST_F(JobReadsTest, ANewPlanReplacesTheIndexBuiltFromTheLastOne) {
  Add(1, JobState::kQueued);
  Add(2, JobState::kQueued);
  reads_.SetPlan({WaitingJob{1, 1, WaitReason::kHead}, WaitingJob{2, 2, WaitReason::kHeld}}, 1);
  EXPECT_EQ(reads_.View(table_.jobs().at(2)).queue_position, 2);  // Builds the index.
  // Job 1 left the queue; job 2 alone waits, first now.
  reads_.SetPlan({WaitingJob{2, 1, WaitReason::kHead}}, 2);
  EXPECT_EQ(reads_.plan_head(), 2u);
  JobView v = reads_.View(table_.jobs().at(2));
  EXPECT_EQ(v.queue_position, 1);
  EXPECT_EQ(v.waiting_for, "first in line: no room for job 2");
  EXPECT_EQ(reads_.View(table_.jobs().at(1)).queue_position, 0);
}

TEST_F(JobReadsTest, AHeldJobWaitsForItsHoldBeforeItsQuota) {
  Job& held = Add(1, JobState::kQueued);
  held.hold = core::HoldKind::kAdmin;
  Add(2, JobState::kQueued);
  reads_.SetPlan({WaitingJob{1, 1, WaitReason::kHeld}, WaitingJob{2, 2, WaitReason::kHeld}}, 0);
  EXPECT_EQ(reads_.View(table_.jobs().at(1)).waiting_for,
            "held by an admin (an admin releases it: gpuslice release 1)");
  EXPECT_EQ(reads_.View(table_.jobs().at(2)).waiting_for, "quota: bob's group is at its limit");
}

TEST_F(JobReadsTest, GetRunsAPendingPlanFirstAndRefusesAnUnknownJob) {
  Add(1, JobState::kQueued);
  ASSERT_TRUE(reads_.Get(1).ok());
  EXPECT_EQ(flushes_, 1);
  auto missing = reads_.Get(9);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "no job 9");
  EXPECT_EQ(flushes_, 2);
}

TEST_F(JobReadsTest, ListLeavesOutEndedJobsUnlessAsked) {
  Add(1, JobState::kExited);
  Add(2, JobState::kQueued);
  std::vector<JobView> live = reads_.List(false);
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].job.id, 2u);
  EXPECT_EQ(reads_.List(true).size(), 2u);
}

TEST_F(JobReadsTest, QueryPagesWithACursor) {
  for (uint64_t id = 1; id <= 5; ++id) Add(id, JobState::kQueued);
  JobQuery q;
  q.limit = 2;
  JobPage first = reads_.Query(q);
  ASSERT_EQ(first.jobs.size(), 2u);
  EXPECT_EQ(first.jobs[1].job.id, 2u);
  ASSERT_TRUE(first.next_cursor.has_value());
  q.after_id = *first.next_cursor;
  JobPage second = reads_.Query(q);
  ASSERT_EQ(second.jobs.size(), 2u);
  EXPECT_EQ(second.jobs[0].job.id, 3u);
  q.after_id = *second.next_cursor;
  JobPage last = reads_.Query(q);
  ASSERT_EQ(last.jobs.size(), 1u);
  EXPECT_EQ(last.jobs[0].job.id, 5u);
  EXPECT_FALSE(last.next_cursor.has_value());
}

TEST_F(JobReadsTest, SummaryCountsEachStateFromTheStartWhateverTheCursor) {
  Add(1, JobState::kQueued);
  Add(2, JobState::kQueued);
  Add(3, JobState::kRunning);
  table_.live()[3];
  JobQuery q;
  q.after_id = 2;  // A cursor does not narrow a summary.
  JobSummary s = reads_.Summary(q);
  EXPECT_EQ(s.counts["queued"], 2u);
  EXPECT_EQ(s.counts["running"], 1u);
  EXPECT_EQ(s.first.size(), s.groups.size());
  EXPECT_EQ(flushes_, 1);
}

TEST_F(JobReadsTest, ReadLogRefusesAnotherUsersJobAndABadStream) {
  Add(1, JobState::kRunning);
  auto theirs = reads_.ReadLog(CallerOf("bob", 1001), 1, "stdout", 0, 100);
  ASSERT_FALSE(theirs.ok());
  EXPECT_EQ(theirs.status().code(), core::StatusCode::kPermissionDenied);
  auto bad = reads_.ReadLog(CallerOf("alice", 1000), 1, "stdin", 0, 100);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "stream must be stdout or stderr, not 'stdin'");
}

TEST_F(JobReadsTest, ReadLogReadsTheOwnersLogFromItsJobDirectory) {
  Add(1, JobState::kRunning);
  ASSERT_EQ(
      system(("mkdir -p " + dir_ + "/1 && printf 'hello\\n' > " + dir_ + "/1/stdout").c_str()), 0);
  auto chunk = reads_.ReadLog(CallerOf("alice", 1000), 1, "stdout", 0, 100);
  ASSERT_TRUE(chunk.ok()) << chunk.status().message();
  EXPECT_EQ(chunk->data, "hello\n");
  EXPECT_EQ(chunk->next_offset, 6u);
  EXPECT_EQ(chunk->state, JobState::kRunning);
}

TEST_F(JobReadsTest, HistoryComesFromTheLedgerAndSaysWhyItCannot) {
  auto h = reads_.History(4);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().message(), "ledger unavailable: no ledger for job 4");
}

TEST_F(JobReadsTest, PublicTextHidesTheJobsEnvironmentValues) {
  Job& job = Add(1, JobState::kQueued);
  job.env = {"TOKEN=s3cret-value"};
  EXPECT_EQ(reads_.PublicText(1, "saw s3cret-value").find("s3cret-value"), std::string::npos);
  EXPECT_EQ(reads_.PublicText(7, "no such job: s3cret-value"), "no such job: s3cret-value");
}

TEST_F(JobReadsTest, ALiveJobsFlagsSayIdlePausedAndOutsideItsPool) {
  Job& job = Add(1, JobState::kRunning);
  job.allocation.gpu_indices = {0, 1};
  table_.live()[1].paused = true;
  idle_.insert(1);
  pools_[1] = "training";
  EXPECT_EQ(reads_.FlagsOf(1), (std::vector<std::string>{"idle", "paused", "outside_pool"}));
  EXPECT_EQ(reads_.OutsidePoolText(job),
            "outside its pool 'default' since the configuration changed: GPU 1 is in pool "
            "'training'; it runs on where it is, and nothing new of pool 'default' is placed "
            "there");
  EXPECT_TRUE(reads_.FlagsOf(2).empty());  // Not live: no flags.
}

}  // namespace
}  // namespace gpuslice::daemon
