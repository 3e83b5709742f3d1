// External jobs (mode external): slices held for processes started by
// someone else (the Kubernetes device plugin), never queued, released by
// their owner; labels; live priority changes.

#include <gtest/gtest.h>

#include "daemon/jobs/test_support.h"

namespace gpuslice::daemon {
namespace {

using core::JobState;

class ExternalJobTest : public ServiceFixture {
 protected:
  SubmitSpec External(const std::string& mem, const std::string& compute = "",
                      std::vector<std::string> gpus = {}) {
    SubmitSpec s;
    s.mode = core::JobMode::kExternal;
    s.fields.mem = mem;
    if (!compute.empty()) s.fields.compute = compute;
    s.gpu_uuids = std::move(gpus);
    return s;
  }
  SubmitSpec Host(const std::string& mem) {
    SubmitSpec s;
    s.fields.mem = mem;
    s.argv = {"sleep", "100"};
    s.cwd = "/tmp";
    return s;
  }
  Caller root_ = TestCaller(0, /*admin=*/true);
};

TEST_F(ExternalJobTest, RunsAtOnceOnTheNamedGpuAndLaunchesNothing) {
  auto v = service_->intake().Submit(root_, External("8GiB", "30%", {"GPU-1"}));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->job.state, JobState::kRunning);
  EXPECT_EQ(v->job.mode, core::JobMode::kExternal);
  EXPECT_EQ(v->job.allocation.gpu_uuids, std::vector<std::string>{"GPU-1"});
  EXPECT_EQ(v->job.pid, 0);
  EXPECT_TRUE(launcher_.launches.empty());
  // Its slice exists with its limits, as for any job.
  ASSERT_EQ(regions_.regions.count(v->job.region_path), 1u);
  EXPECT_EQ(regions_.regions[v->job.region_path].memory_bytes_per_device, 8 * core::kGiB);
  EXPECT_EQ(regions_.regions[v->job.region_path].compute_milli, 300u);
  // It stays running: nothing of its own can end.
  clock_.Advance(60'000);
  service_->Tick();
  EXPECT_EQ(State(v->job.id), JobState::kRunning);
}

TEST_F(ExternalJobTest, IsRefusedNotQueuedWhenTheGpuIsFull) {
  ASSERT_TRUE(service_->intake().Submit(root_, External("70GiB", "", {"GPU-0"})).ok());
  auto v = service_->intake().Submit(root_, External("20GiB", "", {"GPU-0"}));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(v.status().message().find("does not fit now"), std::string::npos)
      << v.status().message();
  // Nothing was left behind: the other GPU still takes it, and no job was queued.
  auto other = service_->intake().Submit(root_, External("20GiB", "", {"GPU-0", "GPU-1"}));
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->job.allocation.gpu_uuids, std::vector<std::string>{"GPU-1"});
  for (const JobView& j : service_->reads().List(true)) EXPECT_NE(j.job.state, JobState::kQueued);
}

TEST_F(ExternalJobTest, UnknownGpusAndCommandsAreRefusedWithTheReason) {
  auto v = service_->intake().Submit(root_, External("8GiB", "", {"GPU-9"}));
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("GPU-9"), std::string::npos) << v.status().message();
  SubmitSpec with_argv = External("8GiB");
  with_argv.argv = {"true"};
  v = service_->intake().Submit(root_, with_argv);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("runs nothing"), std::string::npos);
  SubmitSpec paused_host = Host("8GiB");
  paused_host.paused = true;
  EXPECT_FALSE(service_->intake().Submit(root_, paused_host).ok());
}

TEST_F(ExternalJobTest, WholeGpusAndMigFollowTheNamedDevices) {
  SubmitSpec whole;
  whole.mode = core::JobMode::kExternal;
  whole.fields.gpus = "1";
  whole.gpu_uuids = {"GPU-1"};
  auto v = service_->intake().Submit(root_, whole);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->job.allocation.gpu_uuids, std::vector<std::string>{"GPU-1"});
  // GPU-1 is taken whole: a fraction there is refused, GPU-0 still takes one.
  EXPECT_FALSE(service_->intake().Submit(root_, External("1GiB", "", {"GPU-1"})).ok());
  EXPECT_TRUE(service_->intake().Submit(root_, External("1GiB", "", {"GPU-0"})).ok());
}

TEST_F(ExternalJobTest, ReleaseEndsItExitedAndFreesTheGpu) {
  auto v = service_->intake().Submit(root_, External("70GiB", "", {"GPU-0"}));
  ASSERT_TRUE(v.ok());
  const std::string region = v->job.region_path;
  ASSERT_TRUE(service_->Cancel(root_, v->job.id).ok());
  JobView after = Get(v->job.id);
  EXPECT_EQ(after.job.state, JobState::kExited);
  EXPECT_EQ(after.job.exit_code, 0);
  EXPECT_NE(after.job.reason.find("released by"), std::string::npos) << after.job.reason;
  EXPECT_EQ(regions_.regions.count(region), 0u);
  EXPECT_TRUE(service_->intake().Submit(root_, External("70GiB", "", {"GPU-0"})).ok());
}

TEST_F(ExternalJobTest, OnlyItsOwnerOrAnAdminReleasesOrLabelsIt) {
  auto v = service_->intake().Submit(TestCaller(1000), External("8GiB"));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(service_->Cancel(TestCaller(1001), v->job.id).code(),
            core::StatusCode::kPermissionDenied);
  EXPECT_EQ(
      service_->edits().SetLabels(TestCaller(1001), v->job.id, {{"pod", "x"}}).status().code(),
      core::StatusCode::kPermissionDenied);
  EXPECT_TRUE(service_->edits().SetLabels(TestCaller(1000), v->job.id, {{"pod", "x"}}).ok());
}

TEST_F(ExternalJobTest, PausedUntilResumedAndAResizeKeepsThePause) {
  SubmitSpec s = External("8GiB", "", {"GPU-0"});
  s.paused = true;
  auto v = service_->intake().Submit(root_, s);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const std::string region = v->job.region_path;
  EXPECT_TRUE(regions_.regions[region].launches_paused);
  EXPECT_NE(std::find(v->flags.begin(), v->flags.end(), "paused"), v->flags.end());
  // The device plugin sets the share it learnt from the kubelet, then resumes.
  ResizeSpec r;
  r.compute = "30%";
  ASSERT_TRUE(service_->live().Resize(root_, v->job.id, r).ok());
  EXPECT_TRUE(regions_.regions[region].launches_paused);  // Regression: a resize unpaused it.
  EXPECT_EQ(regions_.regions[region].compute_milli, 300u);
  ASSERT_TRUE(service_->live().Resume(root_, v->job.id).ok());
  EXPECT_FALSE(regions_.regions[region].launches_paused);
}

TEST_F(ExternalJobTest, LabelsAreKeptAcrossARestartAndValidated) {
  SubmitSpec s = External("8GiB");
  s.labels = {{"namespace", "ml"}, {"pod", "infer-0"}};
  auto v = service_->intake().Submit(root_, s);
  ASSERT_TRUE(v.ok());
  auto l = service_->edits().SetLabels(
      root_, v->job.id, {{"namespace", "ml"}, {"pod", "infer-0"}, {"container", "server"}});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->job.labels.at("container"), "server");
  EXPECT_FALSE(service_->edits().SetLabels(root_, v->job.id, {{"bad key", "x"}}).ok());
  Restart();
  JobView after = Get(v->job.id);
  EXPECT_EQ(after.job.state, JobState::kRunning);  // Re-adopted: it lives until released.
  EXPECT_EQ(after.job.mode, core::JobMode::kExternal);
  EXPECT_EQ(after.job.labels.at("container"), "server");
  // Its GPU memory is still held after the restart.
  EXPECT_FALSE(service_->intake()
                   .Submit(root_, External("75GiB", "", {after.job.allocation.gpu_uuids[0]}))
                   .ok());
}

TEST_F(ExternalJobTest, PreemptionPassesItBy) {
  options_.rules.preemption.mode = core::PreemptionMode::kLower;
  Restart();
  SubmitSpec low = External("80GiB", "", {"GPU-0"});
  low.fields.priority = "low";
  ASSERT_TRUE(service_->intake().Submit(root_, low).ok());
  SubmitSpec low2 = External("80GiB", "", {"GPU-1"});
  low2.fields.priority = "low";
  ASSERT_TRUE(service_->intake().Submit(root_, low2).ok());
  SubmitSpec high = Host("80GiB");
  high.fields.priority = "high";
  auto h = service_->intake().Submit(TestCaller(1000), high);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  clock_.Advance(5000);
  service_->Tick();
  EXPECT_EQ(State(h->job.id), JobState::kQueued);
  for (const JobView& j : service_->reads().List(false)) {
    if (j.job.mode == core::JobMode::kExternal) {
      EXPECT_EQ(j.job.state, JobState::kRunning);
    }
  }
}

TEST_F(ExternalJobTest, PriorityChangesLive) {
  auto v = service_->intake().Submit(root_, External("8GiB", "30%"));
  ASSERT_TRUE(v.ok());
  ResizeSpec r;
  r.priority = "high";
  auto after = service_->live().Resize(root_, v->job.id, r);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->job.request.priority, core::Priority::kHigh);
  EXPECT_EQ(regions_.regions[v->job.region_path].priority, core::Priority::kHigh);
  r.priority = "urgent";
  EXPECT_NE(service_->live().Resize(root_, v->job.id, r).status().message().find("--priority"),
            std::string::npos);
  // Any running job, whole GPUs too.
  SubmitSpec whole;
  whole.mode = core::JobMode::kExternal;
  whole.fields.gpus = "1";
  auto w = service_->intake().Submit(root_, whole);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  r.priority = "low";
  EXPECT_TRUE(service_->live().Resize(root_, w->job.id, r).ok());
}

}  // namespace
}  // namespace gpuslice::daemon
