#include "daemon/table/job_table.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::JobState;

Job MakeJob(uint64_t id, const std::string& user, uint32_t uid, JobState state) {
  Job job;
  job.id = id;
  job.user = user;
  job.uid = uid;
  job.state = state;
  return job;
}

core::QueuedJob Queued(uint64_t id, core::Priority priority = core::Priority::kNormal) {
  core::QueuedJob q;
  q.id = id;
  q.seq = id;
  q.priority = priority;
  return q;
}

std::vector<uint64_t> Visit(const JobTable& table, uint64_t after,
                            const std::vector<std::string>& users, bool live_only,
                            size_t stop_after = 100) {
  std::vector<uint64_t> seen;
  table.VisitCandidates(after, users, live_only, [&](const Job& job) {
    seen.push_back(job.id);
    return seen.size() < stop_after;
  });
  return seen;
}

TEST(JobTable, IdsAreNeverReusedAndContinueAfterTheLedgersHighest) {
  JobTable table;
  EXPECT_EQ(table.next_id(), 1u);
  EXPECT_EQ(table.last_id(), 0u);
  table.Add(MakeJob(table.next_id(), "alice", 1000, JobState::kQueued));
  EXPECT_EQ(table.next_id(), 2u);
  table.ContinueIdsAfter(41);
  EXPECT_EQ(table.next_id(), 42u);
  // A lower id (an older ledger row, a recovered job) never takes ids back.
  table.ContinueIdsAfter(7);
  table.Add(MakeJob(5, "bob", 1001, JobState::kExited));
  EXPECT_EQ(table.next_id(), 42u);
  EXPECT_EQ(table.last_id(), 41u);
}

TEST(JobTable, TheQueueKeepsItsOrderAndCountsEachUsersJobs) {
  JobTable table;
  for (uint64_t id : {1, 2, 3}) table.Add(MakeJob(id, "alice", 1000, JobState::kQueued));
  table.Add(MakeJob(4, "bob", 1001, JobState::kQueued));
  table.Enqueue(Queued(1), 1000);
  table.Enqueue(Queued(2), 1000);
  table.Enqueue(Queued(4, core::Priority::kHigh), 1001);
  table.Enqueue(Queued(3), 1000);
  ASSERT_EQ(table.queued_count(), 4u);
  EXPECT_EQ(table.queue().front().id, 4u);  // High priority first.
  EXPECT_EQ(table.QueuedOf(1000), 3u);
  EXPECT_EQ(table.QueuedOf(1001), 1u);
  table.Dequeue(2);
  table.Dequeue(2);  // Not queued any more: nothing changes.
  EXPECT_EQ(table.QueuedOf(1000), 2u);
  table.Dequeue(4);
  EXPECT_EQ(table.QueuedOf(1001), 0u);
  std::vector<uint64_t> order;
  for (const auto& q : table.queue()) order.push_back(q.id);
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 3}));
}

TEST(JobTable, CandidatesOfNamedUsersComeFromTheirOwnListsInIdOrder) {
  JobTable table;
  table.Add(MakeJob(1, "alice", 1000, JobState::kQueued));
  table.Add(MakeJob(2, "bob", 1001, JobState::kQueued));
  table.Add(MakeJob(3, "carol", 1002, JobState::kQueued));
  table.Add(MakeJob(4, "alice", 1000, JobState::kQueued));
  table.Add(MakeJob(5, "bob", 1001, JobState::kQueued));
  EXPECT_EQ(Visit(table, 0, {"bob", "alice"}, false), (std::vector<uint64_t>{1, 2, 4, 5}));
  EXPECT_EQ(Visit(table, 2, {"bob", "alice"}, false), (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(Visit(table, 0, {"alice", "alice"}, false), (std::vector<uint64_t>{1, 4}));
  EXPECT_EQ(Visit(table, 0, {"nobody"}, false), (std::vector<uint64_t>{}));
  EXPECT_EQ(Visit(table, 0, {}, false, 2), (std::vector<uint64_t>{1, 2}));
}

TEST(JobTable, LiveOnlyCandidatesAreTheRunningAndSuspendedJobs) {
  JobTable table;
  table.Add(MakeJob(1, "alice", 1000, JobState::kRunning));
  table.Add(MakeJob(2, "alice", 1000, JobState::kQueued));
  table.Add(MakeJob(3, "alice", 1000, JobState::kSuspended));
  table.live()[1];
  table.live()[3];
  EXPECT_EQ(Visit(table, 0, {}, true), (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(table.running_count(), 1u);
  EXPECT_TRUE(table.IsSuspended(3));
  EXPECT_FALSE(table.IsSuspended(1));
  EXPECT_FALSE(table.IsSuspended(99));
}

TEST(JobTable, SlicesByGpuLeaveSuspendedJobsOut) {
  JobTable table;
  Job a = MakeJob(1, "alice", 1000, JobState::kRunning);
  a.allocation.gpu_indices = {0, 1};
  Job b = MakeJob(2, "bob", 1001, JobState::kSuspended);
  b.allocation.gpu_indices = {1};
  Job c = MakeJob(3, "bob", 1001, JobState::kRunning);
  c.allocation.gpu_indices = {1};
  table.Add(a);
  table.Add(b);
  table.Add(c);
  for (uint64_t id : {1, 2, 3}) table.live()[id];
  auto slices = table.SlicesByGpu();
  EXPECT_EQ(slices[0], (std::vector<uint64_t>{1}));
  EXPECT_EQ(slices[1], (std::vector<uint64_t>{1, 3}));
}

TEST(JobTable, TrimmingForgetsTheOldestFinishedJobsButNotTheRecentOnes) {
  JobTable table;
  for (uint64_t id = 1; id <= 5; ++id) {
    Job job = MakeJob(id, "alice", 1000, JobState::kExited);
    job.ended_ms = static_cast<int64_t>(id) * 1000;
    table.Add(job);
  }
  table.Add(MakeJob(6, "alice", 1000, JobState::kQueued));
  // Keep 2; jobs that ended at or after 4 s stay however many there are.
  EXPECT_EQ(table.TrimHistory(2, 4000), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(table.Find(3), nullptr);
  ASSERT_NE(table.Find(4), nullptr);
  ASSERT_NE(table.Find(6), nullptr);
  // The owner index forgot them too.
  EXPECT_EQ(Visit(table, 0, {"alice"}, false), (std::vector<uint64_t>{4, 5, 6}));
  EXPECT_TRUE(table.TrimHistory(2, 10'000).empty());  // Two finished: none over.
  EXPECT_TRUE(table.TrimHistory(1, 0).empty());       // Both ended too recently.
  EXPECT_EQ(table.TrimHistory(1, 10'000), (std::vector<uint64_t>{4}));
  EXPECT_EQ(Visit(table, 0, {"alice"}, false), (std::vector<uint64_t>{5, 6}));
}

TEST(JobTable, AddingAJobAgainReplacesItAndItsOwnerEntry) {
  JobTable table;
  table.Add(MakeJob(1, "alice", 1000, JobState::kQueued));
  table.Add(MakeJob(1, "bob", 1001, JobState::kQueued));
  EXPECT_EQ(Visit(table, 0, {"alice"}, false), (std::vector<uint64_t>{}));
  EXPECT_EQ(Visit(table, 0, {"bob"}, false), (std::vector<uint64_t>{1}));
  int live = 0;
  table.ForEachLiveJob([&](const Job&) { ++live; });
  EXPECT_EQ(live, 1);
}

}  // namespace
}  // namespace gpuslice::daemon
