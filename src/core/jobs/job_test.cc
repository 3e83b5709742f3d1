#include "core/jobs/job.h"

#include <gtest/gtest.h>

namespace gpuslice::core {
namespace {

TEST(JobState, NamesRoundTrip) {
  for (JobState s : {JobState::kQueued, JobState::kRunning, JobState::kExited, JobState::kCancelled,
                     JobState::kTimedOut, JobState::kFailed, JobState::kSuspended}) {
    auto parsed = ParseJobState(JobStateName(s));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_FALSE(ParseJobState("done").ok());
}

TEST(JobState, TransitionsFollowTheDiagram) {
  struct Case {
    JobState from, to;
    bool ok;
  } cases[] = {
      {JobState::kQueued, JobState::kRunning, true},
      {JobState::kQueued, JobState::kCancelled, true},
      {JobState::kQueued, JobState::kExited, false},
      {JobState::kRunning, JobState::kExited, true},
      {JobState::kRunning, JobState::kTimedOut, true},
      {JobState::kRunning, JobState::kQueued, true},  // Preempted, restartable.
      {JobState::kQueued, JobState::kQueued, false},
      {JobState::kExited, JobState::kRunning, false},
      {JobState::kCancelled, JobState::kCancelled, false},
      {JobState::kRunning, JobState::kSuspended, true},
      {JobState::kSuspended, JobState::kRunning, true},
      {JobState::kSuspended, JobState::kCancelled, true},
      {JobState::kSuspended, JobState::kExited, true},
      {JobState::kQueued, JobState::kSuspended, false},  // Nothing to suspend.
      {JobState::kSuspended, JobState::kQueued, false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(CanTransition(c.from, c.to), c.ok)
        << JobStateName(c.from) << " -> " << JobStateName(c.to);
  }
  EXPECT_TRUE(IsTerminal(JobState::kFailed));
  EXPECT_FALSE(IsTerminal(JobState::kRunning));
  EXPECT_FALSE(IsTerminal(JobState::kSuspended));
}

TEST(BuildRequest, PoolIsValidated) {
  RequestFields f;
  f.mem = "1GiB";
  f.pool = "inference";
  EXPECT_EQ(BuildRequest(f)->pool, "inference");
  f.pool = "a b";
  auto bad = BuildRequest(f);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--pool 'a b'"), std::string::npos);
}

TEST(BuildRequest, FractionWithComputeShare) {
  RequestFields f;
  f.mem = "8GiB";
  f.compute = "30%";
  f.priority = "high";
  f.name = "train-1";
  f.max_runtime = "2h";
  auto r = BuildRequest(f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->kind, RequestKind::kFraction);
  EXPECT_EQ(r->memory_bytes, 8 * kGiB);
  EXPECT_EQ(r->compute_milli, 300u);
  EXPECT_EQ(r->priority, Priority::kHigh);
  EXPECT_EQ(r->name, "train-1");
  EXPECT_EQ(r->max_runtime->count(), 2 * 3600 * 1000);
}

TEST(BuildRequest, WholeGpusAndMig) {
  RequestFields g;
  g.gpus = "2";
  auto r = BuildRequest(g);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, RequestKind::kWholeGpus);
  EXPECT_EQ(r->gpus_min, 2u);
  RequestFields m;
  m.mig = "1g.10gb";
  auto mr = BuildRequest(m);
  ASSERT_TRUE(mr.ok());
  EXPECT_EQ(mr->kind, RequestKind::kMig);
  EXPECT_EQ(mr->mig.memory_gb, 10u);
}

TEST(BuildRequest, ErrorsNameTheFieldAndToken) {
  struct Case {
    RequestFields f;
    const char* needle;
  };
  std::vector<Case> cases;
  cases.push_back({RequestFields{}, "no resources asked"});
  RequestFields both;
  both.gpus = "1";
  both.mem = "1GiB";
  cases.push_back({both, "exclude each other"});
  RequestFields bad_mem;
  bad_mem.mem = "12XB";
  cases.push_back({bad_mem, "--mem"});
  RequestFields zero_mem;
  zero_mem.mem = "0";
  cases.push_back({zero_mem, "more than 0"});
  RequestFields bare_mem;  // "--mem 8" is refused, not read as 8 bytes.
  bare_mem.mem = "8";
  cases.push_back({bare_mem, "--mem: size '8' has no unit: did you mean '8GiB'?"});
  RequestFields lone_compute;
  lone_compute.compute = "30%";
  cases.push_back({lone_compute, "--compute goes with --mem"});
  RequestFields bad_prio;
  bad_prio.gpus = "1";
  bad_prio.priority = "urgent";
  cases.push_back({bad_prio, "--priority"});
  RequestFields bad_name;
  bad_name.gpus = "1";
  bad_name.name = "a b";
  cases.push_back({bad_name, "name 'a b'"});
  RequestFields bad_rt;
  bad_rt.gpus = "1";
  bad_rt.max_runtime = "soon";
  cases.push_back({bad_rt, "--max-runtime"});
  for (const Case& c : cases) {
    auto r = BuildRequest(c.f);
    ASSERT_FALSE(r.ok()) << c.needle;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
  }
}

TEST(Job, DeadlineNeedsStartAndRuntime) {
  Job j;
  EXPECT_FALSE(j.DeadlineMs().has_value());
  j.request.max_runtime = std::chrono::milliseconds(500);
  EXPECT_FALSE(j.DeadlineMs().has_value());
  j.started_ms = 1000;
  EXPECT_EQ(*j.DeadlineMs(), 1500);
}

TEST(Job, TimeSuspendedDoesNotCountAgainstTheMaximumRunTime) {
  Job j;
  j.request.max_runtime = std::chrono::milliseconds(500);
  j.started_ms = 1000;
  j.suspended_since_ms = 1200;
  EXPECT_FALSE(j.DeadlineMs().has_value());  // Cannot run out while suspended.
  j.suspended_since_ms = 0;
  j.suspended_total_ms = 3000;
  EXPECT_EQ(*j.DeadlineMs(), 4500);
}

TEST(BuildRequest, ComputeModeGoesWithAComputeShare) {
  RequestFields f;
  f.mem = "8GiB";
  f.compute = "30%";
  f.compute_mode = "work-conserving";
  auto r = BuildRequest(f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->compute_mode, ComputeMode::kWorkConserving);
  EXPECT_EQ(r->Describe(), "8 GiB + 30% (work-conserving)");
  f.compute_mode = "hard";
  EXPECT_EQ(BuildRequest(f)->compute_mode, ComputeMode::kHard);
  f.compute_mode = "soft";
  auto bad = BuildRequest(f);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--compute-mode"), std::string::npos);
  EXPECT_NE(bad.status().message().find("'soft'"), std::string::npos);
  RequestFields no_share;
  no_share.mem = "8GiB";
  no_share.compute_mode = "work-conserving";
  auto lone = BuildRequest(no_share);
  ASSERT_FALSE(lone.ok());
  EXPECT_NE(lone.status().message().find("--compute-mode goes with --compute"), std::string::npos);
  RequestFields whole;
  whole.gpus = "1";
  whole.compute_mode = "hard";
  EXPECT_FALSE(BuildRequest(whole).ok());
}

}  // namespace
}  // namespace gpuslice::core

namespace gpuslice::core {
namespace {

TEST(JobMode, ExternalRoundTrips) {
  auto m = ParseJobMode("external");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m, JobMode::kExternal);
  EXPECT_EQ(JobModeName(JobMode::kExternal), "external");
  EXPECT_NE(ParseJobMode("pod").status().message().find("external"), std::string::npos);
}

TEST(Labels, KubernetesNamesAreAccepted) {
  EXPECT_TRUE(ValidateLabels({{"namespace", "ml-team"},
                              {"pod", "infer-7d9f-abc"},
                              {"container", "server"},
                              {"gpuslice.dev/device-plugin", "node-1"}})
                  .ok());
  EXPECT_TRUE(ValidateLabels({{"empty", ""}}).ok());
}

TEST(Labels, BadKeysAndValuesAreNamed) {
  Status s = ValidateLabels({{"bad key", "x"}});
  EXPECT_NE(s.message().find("bad key"), std::string::npos) << s.message();
  EXPECT_FALSE(ValidateLabels({{"", "x"}}).ok());
  EXPECT_FALSE(ValidateLabels({{std::string(64, 'k'), "x"}}).ok());
  s = ValidateLabels({{"pod", "a\"b"}});
  EXPECT_NE(s.message().find("'pod'"), std::string::npos) << s.message();
  EXPECT_FALSE(ValidateLabels({{"pod", "line\nbreak"}}).ok());
  EXPECT_FALSE(ValidateLabels({{"pod", std::string(254, 'v')}}).ok());
  std::map<std::string, std::string> many;
  for (int i = 0; i < 33; ++i) many["k" + std::to_string(i)] = "v";
  EXPECT_NE(ValidateLabels(many).message().find("at most 32"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::core
