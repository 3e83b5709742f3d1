#include "daemon/requests/job_query.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

core::Job MakeJob(uint64_t id, std::string user, std::string name,
                  core::JobState state = core::JobState::kQueued, std::string pool = "") {
  core::Job j;
  j.id = id;
  j.user = std::move(user);
  j.state = state;
  j.request.kind = core::RequestKind::kFraction;
  j.request.memory_bytes = 8ull << 30;
  j.request.compute_milli = 300;
  j.request.name = std::move(name);
  j.request.pool = std::move(pool);
  return j;
}

TEST(JobQuery, NoParametersMeansLiveJobsOnTheDefaultPage) {
  auto q = ParseJobQuery({});
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(q->states.empty());
  EXPECT_FALSE(q->include_finished);
  EXPECT_EQ(q->limit, kDefaultJobLimit);
  EXPECT_EQ(q->after_id, 0u);
  EXPECT_TRUE(JobMatches(MakeJob(1, "a", ""), *q, "default"));
  EXPECT_FALSE(JobMatches(MakeJob(1, "a", "", core::JobState::kExited), *q, "default"));
}

TEST(JobQuery, EveryFilterIsParsedFromTheQueryString) {
  auto q = ParseJobQuery({{"state", "queued,running"},
                          {"user", "alice,bob"},
                          {"name", "train,eval*"},
                          {"pool", "inference"},
                          {"held", "1"},
                          {"limit", "0"},
                          {"cursor", "120"}});
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(q->states,
            (std::set<core::JobState>{core::JobState::kQueued, core::JobState::kRunning}));
  EXPECT_EQ(q->users, (std::vector<std::string>{"alice", "bob"}));
  EXPECT_EQ(q->names, (std::vector<std::string>{"train", "eval*"}));
  EXPECT_EQ(q->pool, "inference");
  EXPECT_EQ(q->held, true);
  EXPECT_EQ(q->limit, 0u);
  EXPECT_EQ(q->after_id, 120u);
}

TEST(JobQuery, AnEndedStateIncludesFinishedJobs) {
  auto q = ParseJobQuery({{"state", "ended"}});
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(q->include_finished);
  EXPECT_EQ(q->states.size(), 4u);
  EXPECT_TRUE(JobMatches(MakeJob(1, "a", "", core::JobState::kCancelled), *q, "default"));
  EXPECT_FALSE(JobMatches(MakeJob(1, "a", ""), *q, "default"));
}

TEST(JobQuery, BadParametersAreRefusedNamingTheParameter) {
  struct Case {
    std::map<std::string, std::string> params;
    std::string needle;
  } cases[] = {
      {{{"state", "pending"}}, "state: unknown job state 'pending'"},
      {{{"state", ","}}, "state: no state given"},
      {{{"limit", "ten"}}, "limit: expected a count of jobs"},
      {{{"limit", "-1"}}, "limit:"},
      {{{"cursor", "x"}}, "cursor: expected the next_cursor"},
      {{{"held", "yes"}}, "held: expected 1 or 0"},
      {{{"pool", "a b"}}, "pool"},
      {{{"usr", "alice"}}, "unknown parameter 'usr'"},
  };
  for (const Case& c : cases) {
    auto q = ParseJobQuery(c.params);
    ASSERT_FALSE(q.ok()) << c.needle;
    EXPECT_EQ(q.status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_NE(q.status().message().find(c.needle), std::string::npos) << q.status().message();
  }
}

TEST(JobQuery, ANameFindsItselfTheMembersOfItsArrayAndGlobs) {
  EXPECT_TRUE(NameMatches("train", "train"));
  EXPECT_TRUE(NameMatches("train", "train[3]"));
  EXPECT_TRUE(NameMatches("train[3]", "train[3]"));
  EXPECT_FALSE(NameMatches("train[3]", "train[4]"));
  EXPECT_FALSE(NameMatches("train", "train-b"));
  EXPECT_FALSE(NameMatches("train", "trai"));
  EXPECT_TRUE(NameMatches("train*", "train-b"));
  EXPECT_TRUE(NameMatches("*eval*", "big-eval[2]"));
  EXPECT_TRUE(NameMatches("*", ""));
  EXPECT_FALSE(NameMatches("a*c", "abd"));
  EXPECT_EQ(ArrayBase("train[12]"), "train");
  EXPECT_EQ(ArrayBase("train[]"), "train[]");
  EXPECT_EQ(ArrayBase("[3]"), "[3]");
  EXPECT_EQ(ArrayBase("x[a]"), "x[a]");
}

TEST(JobQuery, UserNamePoolAndHeldFiltersAllApply) {
  auto q = ParseJobQuery({{"user", "alice"}, {"name", "train"}, {"pool", "shared"}});
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(JobMatches(MakeJob(1, "alice", "train[1]"), *q, "shared"));
  EXPECT_TRUE(
      JobMatches(MakeJob(1, "alice", "train", core::JobState::kRunning, "shared"), *q, "default"));
  EXPECT_FALSE(JobMatches(MakeJob(1, "bob", "train"), *q, "shared"));
  EXPECT_FALSE(JobMatches(MakeJob(1, "alice", "eval"), *q, "shared"));
  EXPECT_FALSE(JobMatches(MakeJob(1, "alice", "train"), *q, "default"));
  auto held = ParseJobQuery({{"held", "1"}});
  ASSERT_TRUE(held.ok());
  core::Job j = MakeJob(1, "alice", "");
  EXPECT_FALSE(JobMatches(j, *held, "default"));
  j.hold = core::HoldKind::kUser;
  EXPECT_TRUE(JobMatches(j, *held, "default"));
}

TEST(JobQuery, IdRangesCollapseRunsAndCapTheirNumber) {
  EXPECT_EQ(FormatIdRanges({}), "");
  EXPECT_EQ(FormatIdRanges({7}), "7");
  EXPECT_EQ(FormatIdRanges({3, 4, 5, 7, 9, 10, 11, 12}), "3-5,7,9-12");
  EXPECT_EQ(FormatIdRanges({1, 3, 5, 7, 9}, 2), "1,3,... (3 more)");
}

TEST(JobSummary, ArrayMembersAndIdenticalWaitingJobsCollapseIntoOneGroup) {
  JobSummaryBuilder b;
  uint64_t id = 1;
  b.Add(MakeJob(id++, "alice", "big", core::JobState::kRunning), "default");
  for (int i = 0; i < 100; ++i) {
    b.Add(MakeJob(id++, "alice", "train[" + std::to_string(i) + "]"), "default");
  }
  for (int i = 0; i < 50; ++i) b.Add(MakeJob(id++, "bob", "sweep"), "default");
  core::Job other = MakeJob(id++, "bob", "sweep");
  other.request.priority = core::Priority::kHigh;  // Not identical: its own group.
  b.Add(other, "default");
  core::Job held = MakeJob(id++, "bob", "sweep");
  held.hold = core::HoldKind::kUser;
  b.Add(held, "default");
  EXPECT_EQ(b.counts().at("queued"), 152u);
  EXPECT_EQ(b.counts().at("running"), 1u);
  std::vector<JobGroup> groups = b.Take();
  ASSERT_EQ(groups.size(), 5u);
  EXPECT_EQ(groups[0].ids, std::vector<uint64_t>{1});
  EXPECT_EQ(groups[0].DisplayName(), "big");
  EXPECT_EQ(groups[1].ids.size(), 100u);
  EXPECT_EQ(groups[1].DisplayName(), "train[0-99]");
  EXPECT_EQ(FormatIdRanges(groups[1].ids), "2-101");
  EXPECT_EQ(groups[2].user, "bob");
  EXPECT_EQ(groups[2].ids.size(), 50u);
  EXPECT_EQ(groups[3].priority, "high");
  EXPECT_TRUE(groups[4].held);
}

TEST(JobSummary, JobsOfDifferentStatesUsersOrRequestsStayApart) {
  JobSummaryBuilder b;
  b.Add(MakeJob(1, "alice", "x"), "default");
  b.Add(MakeJob(2, "alice", "x", core::JobState::kRunning), "default");
  b.Add(MakeJob(3, "bob", "x"), "default");
  core::Job bigger = MakeJob(4, "alice", "x");
  bigger.request.memory_bytes = 16ull << 30;
  b.Add(bigger, "default");
  b.Add(MakeJob(5, "alice", "x"), "other");
  b.Add(MakeJob(6, "alice", "x"), "default");
  std::vector<JobGroup> groups = b.Take();
  ASSERT_EQ(groups.size(), 5u);
  EXPECT_EQ(groups[0].ids, (std::vector<uint64_t>{1, 6}));
}

}  // namespace
}  // namespace gpuslice::daemon
