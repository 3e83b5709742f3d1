// Lists of jobs a page at a time, their summary, and changing queued jobs
// (hold, release, update) over a Service with fakes.

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "daemon/jobs/service.h"
#include "daemon/jobs/test_support.h"
#include "daemon/launch/launcher_fake.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

class QueuedJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-queued-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    Restart();
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Restart() {
    service_.reset();
    ServiceOptions o;
    o.state_dir = dir_;
    o.shim_path = "/lib/libgpuslice.so";
    o.sim_lib_dir = "/lib/sim";
    o.kill_grace_ms = 1000;
    o.max_queued_jobs_per_user = 10000;
    service_ = std::make_unique<Service>(o, clock_, inventory_, launcher_, regions_);
    ASSERT_TRUE(service_->Start().ok());
  }

  static Caller User(uint32_t uid, bool admin = false) { return TestCaller(uid, admin); }

  core::Result<JobView> Submit(const Caller& c, std::optional<std::string> mem,
                               std::optional<std::string> gpus, const std::string& name = "",
                               std::optional<std::string> after = std::nullopt) {
    SubmitSpec s;
    s.fields.mem = mem;
    s.fields.gpus = gpus;
    if (!name.empty()) s.fields.name = name;
    if (after) {
      auto deps = core::ParseDependencies(*after);
      if (!deps.ok()) return deps.status();
      s.after = *deps;
    }
    s.argv = {"train"};
    s.cwd = "/home/u";
    return service_->intake().Submit(c, s);
  }

  // Both GPUs taken by one job of user 1, so everything after it waits.
  uint64_t FillTheMachine() {
    auto v = Submit(User(1), std::nullopt, "2", "holder");
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(v->job.state, core::JobState::kRunning);
    return v->job.id;
  }

  void EndJob(uint64_t id) {
    launcher_.Exit(service_->reads().Get(id)->job.pid, 0);
    service_->Tick();
  }

  JobQuery Query(std::map<std::string, std::string> params) {
    auto q = ParseJobQuery(params);
    EXPECT_TRUE(q.ok()) << q.status().ToString();
    return *q;
  }

  core::JobState State(uint64_t id) { return service_->reads().Get(id)->job.state; }

  std::string dir_;
  FakeClock clock_;
  FakeInventory inventory_{SimulatedGpus(2)};
  FakeLauncher launcher_;
  FakeRegionStore regions_;
  std::unique_ptr<Service> service_;
};

// An update that changes one field.
UpdateSpec Spec(std::optional<std::string> UpdateSpec::*field, std::string value) {
  UpdateSpec s;
  s.*field = std::move(value);
  return s;
}

TEST_F(QueuedJobsTest, AListComesAPageAtATimeAndTheCursorWalksEveryJobOnce) {
  FillTheMachine();
  for (int i = 0; i < 250; ++i) {
    ASSERT_TRUE(Submit(User(i % 2 ? 2 : 3), "8GiB", std::nullopt, "sweep").ok());
  }
  JobPage first = service_->reads().Query(Query({}));
  EXPECT_EQ(first.jobs.size(), kDefaultJobLimit);
  ASSERT_TRUE(first.next_cursor.has_value());
  EXPECT_EQ(*first.next_cursor, first.jobs.back().job.id);
  std::set<uint64_t> seen;
  std::optional<uint64_t> cursor;
  int pages = 0;
  do {
    std::map<std::string, std::string> params = {{"limit", "64"}};
    if (cursor) params["cursor"] = std::to_string(*cursor);
    JobPage page = service_->reads().Query(Query(params));
    for (const JobView& v : page.jobs) EXPECT_TRUE(seen.insert(v.job.id).second) << v.job.id;
    cursor = page.next_cursor;
    ++pages;
  } while (cursor);
  EXPECT_EQ(seen.size(), 251u);
  EXPECT_EQ(pages, 4);
  EXPECT_EQ(service_->reads().Query(Query({{"limit", "0"}})).jobs.size(), 251u);
}

TEST_F(QueuedJobsTest, FiltersAreAppliedByTheDaemonBeforeThePageIsCut) {
  const uint64_t holder = FillTheMachine();
  for (int i = 0; i < 150; ++i) ASSERT_TRUE(Submit(User(2), "8GiB", std::nullopt, "a").ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Submit(User(3), "8GiB", std::nullopt, "b[" + std::to_string(i) + "]").ok());
  }
  JobPage mine = service_->reads().Query(Query({{"user", "u3"}}));
  ASSERT_EQ(mine.jobs.size(), 3u);
  EXPECT_FALSE(mine.next_cursor);
  for (const JobView& v : mine.jobs) EXPECT_EQ(v.job.user, "u3");
  EXPECT_EQ(service_->reads().Query(Query({{"name", "b"}})).jobs.size(), 3u);
  EXPECT_EQ(service_->reads().Query(Query({{"name", "b[1]"}})).jobs.size(), 1u);
  JobPage running = service_->reads().Query(Query({{"state", "running"}}));
  ASSERT_EQ(running.jobs.size(), 1u);
  EXPECT_EQ(running.jobs[0].job.id, holder);
  JobPage both = service_->reads().Query(Query({{"user", "u1,u3"}, {"limit", "2"}}));
  ASSERT_EQ(both.jobs.size(), 2u);
  EXPECT_EQ(both.jobs[0].job.id, holder);
  EXPECT_TRUE(both.next_cursor.has_value());
  EXPECT_TRUE(service_->reads().Query(Query({{"user", "nobody"}})).jobs.empty());
  // Queued jobs on a page carry their place in line.
  EXPECT_GT(mine.jobs[0].queue_position, 150);
}

TEST_F(QueuedJobsTest, ASummaryCollapsesAnArrayAndCountsEveryState) {
  FillTheMachine();
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(Submit(User(2), "8GiB", std::nullopt, "train[" + std::to_string(i) + "]").ok());
  }
  ASSERT_TRUE(Submit(User(3), "4GiB", std::nullopt, "eval").ok());
  JobSummary s = service_->reads().Summary(Query({}));
  EXPECT_EQ(s.counts.at("queued"), 41u);
  EXPECT_EQ(s.counts.at("running"), 1u);
  ASSERT_EQ(s.groups.size(), 3u);
  EXPECT_EQ(s.groups[1].DisplayName(), "train[0-39]");
  EXPECT_EQ(s.groups[1].ids.size(), 40u);
  EXPECT_EQ(s.first[1].queue_position, 1);
  EXPECT_FALSE(s.first[1].waiting_for.empty());
  JobSummary one = service_->reads().Summary(Query({{"limit", "1"}}));
  EXPECT_EQ(one.groups.size(), 1u);
  EXPECT_EQ(one.groups_total, 3u);
}

TEST_F(QueuedJobsTest, AHeldJobDoesNotStartUntilReleased) {
  const uint64_t holder = FillTheMachine();
  auto job = Submit(User(2), "8GiB", std::nullopt);
  ASSERT_TRUE(job.ok());
  const uint64_t id = job->job.id;
  auto held = service_->edits().Hold(User(2), id);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_EQ(held->job.hold, core::HoldKind::kUser);
  EXPECT_NE(held->waiting_for.find("held"), std::string::npos) << held->waiting_for;
  EndJob(holder);
  EXPECT_EQ(State(id), core::JobState::kQueued) << "room is free, but it is held";
  EXPECT_EQ(service_->reads().Query(Query({{"held", "1"}})).jobs.size(), 1u);
  // Held across a restart too.
  Restart();
  EXPECT_EQ(State(id), core::JobState::kQueued);
  EXPECT_EQ(service_->reads().Get(id)->job.hold, core::HoldKind::kUser);
  auto released = service_->edits().Release(User(2), id);
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(State(id), core::JobState::kRunning);
}

TEST_F(QueuedJobsTest, AnAdminsHoldOnAnothersJobIsReleasedOnlyByAnAdmin) {
  FillTheMachine();
  auto job = Submit(User(2), "8GiB", std::nullopt);
  ASSERT_TRUE(job.ok());
  const uint64_t id = job->job.id;
  EXPECT_EQ(service_->edits().Hold(User(3), id).status().code(),
            core::StatusCode::kPermissionDenied);
  ASSERT_TRUE(service_->edits().Hold(User(0, /*admin=*/true), id).ok());
  EXPECT_EQ(service_->reads().Get(id)->job.hold, core::HoldKind::kAdmin);
  auto refused = service_->edits().Release(User(2), id);
  EXPECT_EQ(refused.status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("held by an admin"), std::string::npos);
  EXPECT_TRUE(service_->edits().Release(User(0, true), id).ok());
  EXPECT_EQ(service_->edits().Release(User(0, true), id).status().code(),
            core::StatusCode::kFailedPrecondition)
      << "not held any more";
}

TEST_F(QueuedJobsTest, OnlyQueuedJobsAreHeldOrUpdated) {
  const uint64_t holder = FillTheMachine();
  auto hold = service_->edits().Hold(User(1), holder);
  EXPECT_EQ(hold.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(hold.status().message().find("only a queued job can be held"), std::string::npos);
  UpdateSpec spec;
  spec.priority = "high";
  auto update = service_->edits().Update(User(1), holder, spec);
  EXPECT_EQ(update.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(update.status().message().find("gpuslice resize"), std::string::npos);
}

TEST_F(QueuedJobsTest, UpdateChangesAQueuedRequestAndItsPlaceFollowsThePriority) {
  FillTheMachine();
  auto a = Submit(User(2), "8GiB", std::nullopt);
  auto b = Submit(User(2), "8GiB", std::nullopt);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(service_->reads().Get(b->job.id)->queue_position, 2);
  UpdateSpec spec;
  spec.mem = "16GiB";
  spec.compute = "40%";
  spec.priority = "high";
  auto v = service_->edits().Update(User(2), b->job.id, spec);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->job.request.memory_bytes, 16 * core::kGiB);
  EXPECT_EQ(v->job.request.compute_milli, 400u);
  EXPECT_EQ(v->job.request.priority, core::Priority::kHigh);
  EXPECT_EQ(v->job.id, b->job.id);
  EXPECT_EQ(service_->reads().Get(b->job.id)->queue_position, 1);
  // Kept across a restart.
  Restart();
  EXPECT_EQ(service_->reads().Get(b->job.id)->job.request.memory_bytes, 16 * core::kGiB);
}

TEST_F(QueuedJobsTest, UpdateRefusesWhatASubmissionWouldAndChangesNothing) {
  FillTheMachine();
  auto a = Submit(User(2), "8GiB", std::nullopt);
  auto whole = Submit(User(2), std::nullopt, "1");
  ASSERT_TRUE(a.ok() && whole.ok());
  const uint64_t id = a->job.id;
  struct Case {
    uint64_t id;
    UpdateSpec spec;
    std::string needle;
  } cases[] = {
      {id, Spec(&UpdateSpec::mem, "900GiB"), "can never fit"},
      {id, Spec(&UpdateSpec::mem, "8"), "--mem"},
      {id, Spec(&UpdateSpec::compute, "150%"), "--compute"},
      {id, Spec(&UpdateSpec::priority, "urgent"), "--priority"},
      {id, Spec(&UpdateSpec::after, std::to_string(id + 10)),
       "may only wait for jobs submitted before it"},
      {id, Spec(&UpdateSpec::after, "x"), "--after 'x'"},
      {whole->job.id, Spec(&UpdateSpec::mem, "8GiB"), "part of one GPU"},
      {id, {}, "update needs"},
  };
  for (const Case& c : cases) {
    auto v = service_->edits().Update(User(2), c.id, c.spec);
    ASSERT_FALSE(v.ok()) << c.needle;
    EXPECT_NE(v.status().message().find(c.needle), std::string::npos) << v.status().message();
  }
  EXPECT_EQ(service_->reads().Get(id)->job.request.memory_bytes, 8 * core::kGiB);
  EXPECT_EQ(
      service_->edits().Update(User(3), id, Spec(&UpdateSpec::priority, "low")).status().code(),
      core::StatusCode::kPermissionDenied);
}

TEST_F(QueuedJobsTest, UpdateAfterMakesAJobWaitForAnEarlierOne) {
  const uint64_t holder = FillTheMachine();
  auto first = Submit(User(2), "8GiB", std::nullopt);
  auto second = Submit(User(2), "8GiB", std::nullopt);
  ASSERT_TRUE(first.ok() && second.ok());
  auto v = service_->edits().Update(
      User(2), second->job.id, Spec(&UpdateSpec::after, std::to_string(first->job.id) + ":ok"));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EndJob(holder);
  EXPECT_EQ(State(first->job.id), core::JobState::kRunning);
  EXPECT_EQ(State(second->job.id), core::JobState::kQueued);
  EXPECT_NE(service_->reads().Get(second->job.id)->waiting_for.find("after job"),
            std::string::npos);
  // Dropping the dependency lets it start.
  ASSERT_TRUE(service_->edits().Update(User(2), second->job.id, Spec(&UpdateSpec::after, "")).ok());
  EXPECT_EQ(State(second->job.id), core::JobState::kRunning);
}

// The environment redaction leaves the user's own name: events, reasons and
// quota messages must not say `$LOGNAME` where they mean the user.
TEST_F(QueuedJobsTest, EventsAndReasonsNameTheUserNotTheVariableHoldingTheName) {
  Caller alice = User(1001);
  alice.user = "gstest-alice";
  core::Quota one;
  one.jobs = 1;
  ASSERT_TRUE(
      service_->quotas().SetQuota(User(0, true), {core::PrincipalKind::kUser, "gstest-alice"}, one).ok());
  SubmitSpec s;
  s.fields.mem = "8GiB";
  s.argv = {"train"};
  s.cwd = "/home/gstest-alice";
  s.env = {"LOGNAME=gstest-alice", "USER=gstest-alice", "HOME=/home/gstest-alice",
           "TOKEN=very-secret-value"};
  auto first = service_->intake().Submit(alice, s);
  auto second = service_->intake().Submit(alice, s);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_EQ(State(second->job.id), core::JobState::kQueued);
  auto events = service_->events().Query({});
  ASSERT_TRUE(events.ok());
  bool quota_seen = false;
  for (const Event& e : *events) {
    const std::string shown = service_->reads().PublicText(e.job_id, e.message);
    EXPECT_EQ(shown.find("$LOGNAME"), std::string::npos) << shown;
    EXPECT_EQ(shown.find("$USER"), std::string::npos) << shown;
    if (e.kind == "quota_wait") {
      quota_seen = true;
      EXPECT_NE(shown.find("user gstest-alice"), std::string::npos) << shown;
    }
  }
  EXPECT_TRUE(quota_seen);
  ASSERT_TRUE(service_->Cancel(alice, second->job.id).ok());
  const std::string reason = service_->reads().Get(second->job.id)->job.reason;
  EXPECT_EQ(RedactEnvironment(reason, s.env, "gstest-alice"), "cancelled by gstest-alice");
  // What is not the name is still hidden.
  EXPECT_EQ(RedactEnvironment("token very-secret-value of gstest-alice", s.env, "gstest-alice"),
            "token $TOKEN of gstest-alice");
}

}  // namespace
}  // namespace gpuslice::daemon
