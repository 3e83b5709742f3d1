// Job dependencies (`submit --after ID[:ok]`) in the Service, over the fake
// launcher, inventory and regions, with a real ledger in a temp directory.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "daemon/jobs/service.h"
#include "daemon/jobs/test_support.h"
#include "daemon/launch/launcher_fake.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;
using core::JobState;

class DependencyTest : public ServiceFixture {
 protected:
  // A job of `gpus` whole GPUs (of the machine's two), after `after`.
  core::Result<JobView> Submit(const std::string& gpus, const std::string& after = "",
                               const std::string& priority = "normal", uint32_t uid = 1000) {
    SubmitSpec s;
    s.fields.gpus = gpus;
    s.fields.priority = priority;
    s.argv = {"step"};
    s.cwd = "/home/u";
    if (!after.empty()) {
      auto deps = core::ParseDependencies(after);
      if (!deps.ok()) return deps.status();
      s.after = *deps;
    }
    return service_->intake().Submit(TestCaller(uid), s);
  }
  uint64_t MustSubmit(const std::string& gpus, const std::string& after = "",
                      const std::string& priority = "normal") {
    auto v = Submit(gpus, after, priority);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? v->job.id : 0;
  }
  // Ends running job `id` with exit code `code`, as its supervisor records it.
  void Exit(uint64_t id, int code) {
    launcher_.Exit(Get(id).job.pid, code);
    service_->Tick();
  }
};

TEST_F(DependencyTest, AJobAfterAnotherWaitsUntilItExitsThenStarts) {
  uint64_t a = MustSubmit("1");
  uint64_t b = MustSubmit("1", std::to_string(a));
  ASSERT_EQ(State(a), JobState::kRunning);
  // GPU 1 is free, but b waits for a.
  EXPECT_EQ(State(b), JobState::kQueued);
  EXPECT_EQ(Get(b).waiting_for, "after job 1 (running)");
  service_->Tick();
  EXPECT_EQ(State(b), JobState::kQueued);
  Exit(a, 0);
  EXPECT_EQ(State(b), JobState::kRunning);
  EXPECT_EQ(launcher_.launches.size(), 2u);
}

TEST_F(DependencyTest, AfterOkIsCancelledWhenItsDependencyFailsAndTheCancelCascades) {
  uint64_t a = MustSubmit("1");
  uint64_t b = MustSubmit("1", std::to_string(a) + ":ok");
  uint64_t c = MustSubmit("1", std::to_string(b) + ":ok");
  uint64_t d = MustSubmit("1", std::to_string(b));  // Any end of b will do.
  EXPECT_EQ(Get(b).waiting_for, "after job 1:ok (running)");
  EXPECT_EQ(Get(c).waiting_for, "after job 2:ok (queued)");
  Exit(a, 3);
  EXPECT_EQ(State(b), JobState::kCancelled);
  EXPECT_EQ(Get(b).job.reason, "dependency job 1 did not succeed (exit 3)");
  EXPECT_EQ(State(c), JobState::kCancelled);
  EXPECT_EQ(Get(c).job.reason, "dependency job 2 did not succeed (cancelled)");
  EXPECT_EQ(State(d), JobState::kRunning) << "b ended (cancelled): an --after b job may run";
  EventQuery q;
  q.job_id = b;
  auto events = service_->events().Query(q);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->back().kind, "cancelled");
  EXPECT_EQ(events->back().message, "dependency job 1 did not succeed (exit 3)");
}

TEST_F(DependencyTest, AfterOkIsCancelledWhenItsDependencyIsCancelledOrKilled) {
  uint64_t a = MustSubmit("1");
  uint64_t b = MustSubmit("1", std::to_string(a) + ":ok");
  ASSERT_TRUE(service_->Cancel(TestCaller(1000), a).ok());
  service_->Tick();
  ASSERT_EQ(State(a), JobState::kCancelled);
  EXPECT_EQ(State(b), JobState::kCancelled);
  EXPECT_EQ(Get(b).job.reason, "dependency job 1 did not succeed (cancelled)");
  uint64_t c = MustSubmit("1");
  uint64_t d = MustSubmit("1", std::to_string(c) + ":ok");
  Exit(c, 128 + 9);  // Killed by SIGKILL.
  EXPECT_EQ(Get(d).job.reason, "dependency job 3 did not succeed (exit 137)");
}

TEST_F(DependencyTest, AfterAnyIsReleasedWhenItsDependencyFailsOrIsCancelled) {
  uint64_t a = MustSubmit("1");
  uint64_t b = MustSubmit("1", std::to_string(a));
  Exit(a, 3);
  EXPECT_EQ(State(b), JobState::kRunning);
  uint64_t c = MustSubmit("1", std::to_string(b));
  ASSERT_TRUE(service_->Cancel(TestCaller(1000), b).ok());
  service_->Tick();
  EXPECT_EQ(State(c), JobState::kRunning);
}

TEST_F(DependencyTest, AllDependenciesMustBeSatisfied) {
  uint64_t a = MustSubmit("1");
  uint64_t b = MustSubmit("1");
  uint64_t c = MustSubmit("1", std::to_string(a) + "," + std::to_string(b) + ":ok");
  EXPECT_EQ(Get(c).waiting_for, "after job 1 (running), job 2:ok (running)");
  Exit(a, 1);
  EXPECT_EQ(State(c), JobState::kQueued);
  EXPECT_EQ(Get(c).waiting_for, "after job 2:ok (running)");
  Exit(b, 0);
  EXPECT_EQ(State(c), JobState::kRunning);
}

TEST_F(DependencyTest, AnUnknownJobIsRefusedAndNothingIsQueued) {
  auto v = Submit("1", "99");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_EQ(v.status().message(), "--after 99: no job 99");
  EXPECT_TRUE(service_->reads().List(true).empty());
}

TEST_F(DependencyTest, AfterOkOnAJobThatAlreadyFailedIsRefusedOnOneThatSucceededStartsAtOnce) {
  uint64_t failed = MustSubmit("1");
  Exit(failed, 3);
  auto v = Submit("1", std::to_string(failed) + ":ok");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("--after 1:ok: dependency job 1 did not succeed (exit 3)"),
            std::string::npos)
      << v.status().message();
  EXPECT_NE(v.status().message().find("could never start"), std::string::npos);
  // Any end will do: it ended.
  EXPECT_EQ(State(MustSubmit("1", std::to_string(failed))), JobState::kRunning);
  uint64_t done = MustSubmit("1");
  Exit(done, 0);
  EXPECT_EQ(State(MustSubmit("1", std::to_string(done) + ":ok")), JobState::kRunning);
}

TEST_F(DependencyTest, ADependencyForgottenInMemoryIsFoundInTheLedger) {
  uint64_t failed = MustSubmit("1");
  Exit(failed, 3);
  uint64_t done = MustSubmit("1");
  Exit(done, 0);
  // A restart keeps only the newest finished jobs in memory: with a history
  // of 0, both are trimmed once ten minutes have passed.
  clock_.Advance(11 * 60 * 1000);
  options_.history = 0;
  Restart();
  ASSERT_FALSE(service_->reads().Get(failed).ok()) << "trimmed from memory";
  EXPECT_FALSE(Submit("1", std::to_string(failed) + ":ok").ok());
  EXPECT_EQ(State(MustSubmit("1", std::to_string(done) + ":ok")), JobState::kRunning);
}

// A job waiting for a dependency must not become the head of the queue: a
// later job that fits starts (here the waiting job, of higher priority and
// needing both GPUs, would otherwise hold GPU 1 for itself).
TEST_F(DependencyTest, AJobWaitingForADependencyDoesNotHoldUpALaterJobThatFits) {
  uint64_t a = MustSubmit("1");
  uint64_t big = MustSubmit("2", std::to_string(a), "high");
  uint64_t small = MustSubmit("1");
  EXPECT_EQ(State(big), JobState::kQueued);
  EXPECT_EQ(Get(big).waiting_for, "after job 1 (running)");
  EXPECT_EQ(State(small), JobState::kRunning);
  // Once a has ended, big waits for capacity as any job does.
  Exit(a, 0);
  EXPECT_EQ(State(big), JobState::kQueued);
  EXPECT_NE(Get(big).waiting_for.find("first in line"), std::string::npos) << Get(big).waiting_for;
  Exit(small, 0);
  EXPECT_EQ(State(big), JobState::kRunning);
}

TEST_F(DependencyTest, DependenciesSurviveARestart) {
  uint64_t a = MustSubmit("1");
  uint64_t ok = MustSubmit("1", std::to_string(a) + ":ok");
  uint64_t any = MustSubmit("1", std::to_string(a));
  Restart();
  EXPECT_EQ(Get(ok).job.after, (std::vector<core::Dependency>{{a, core::DependencyKind::kOk}}));
  EXPECT_EQ(State(ok), JobState::kQueued);
  EXPECT_EQ(Get(ok).waiting_for, "after job 1:ok (running)");
  EXPECT_EQ(State(any), JobState::kQueued);
  Exit(a, 0);
  EXPECT_EQ(State(ok), JobState::kRunning);
  EXPECT_EQ(State(any), JobState::kRunning);
}

TEST_F(DependencyTest, ADependencyThatFailedWhileTheDaemonWasDownIsJudgedAtRestart) {
  uint64_t a = MustSubmit("1");
  uint64_t ok = MustSubmit("1", std::to_string(a) + ":ok");
  uint64_t next = MustSubmit("1", std::to_string(ok) + ":ok");
  uint64_t any = MustSubmit("1", std::to_string(a));
  launcher_.Exit(Get(a).job.pid, 2);  // While the daemon is down.
  Restart();
  EXPECT_EQ(State(a), JobState::kExited);
  EXPECT_EQ(State(ok), JobState::kCancelled);
  EXPECT_EQ(Get(ok).job.reason, "dependency job 1 did not succeed (exit 2)");
  EXPECT_EQ(State(next), JobState::kCancelled);
  EXPECT_EQ(State(any), JobState::kRunning);
}

TEST_F(DependencyTest, AUserMayWaitForAnotherUsersJob) {
  uint64_t theirs = MustSubmit("1");
  auto mine = Submit("1", std::to_string(theirs), "normal", /*uid=*/2000);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  EXPECT_EQ(mine->job.state, JobState::kQueued);
  EXPECT_EQ(mine->job.user, "u2000");
}

TEST_F(DependencyTest, ACancelledWaitingJobNoLongerWaits) {
  uint64_t a = MustSubmit("1");
  uint64_t b = MustSubmit("1", std::to_string(a) + ":ok");
  ASSERT_TRUE(service_->Cancel(TestCaller(1000), b).ok());
  EXPECT_EQ(Get(b).job.reason, "cancelled by u1000");
  Exit(a, 5);
  EXPECT_EQ(Get(b).job.reason, "cancelled by u1000") << "not cancelled twice";
}

TEST_F(DependencyTest, TheViewCarriesEachDependencyWithItsJobsState) {
  uint64_t a = MustSubmit("1");
  uint64_t b = MustSubmit("1");
  Exit(b, 0);
  uint64_t c = MustSubmit("1", std::to_string(a) + ":ok," + std::to_string(b));
  JobView v = Get(c);
  ASSERT_EQ(v.after.size(), 2u);
  EXPECT_EQ(v.after[0].dep.job_id, a);
  EXPECT_EQ(v.after[0].state, JobState::kRunning);
  EXPECT_EQ(v.after[1].state, JobState::kExited);
  EXPECT_EQ(v.after[1].exit_code, 0);
}

}  // namespace
}  // namespace gpuslice::daemon
