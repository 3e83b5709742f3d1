// What the Service asks of the launcher's job tracking:
// host limits reach the launch, a job's cgroup is released when it ends, an
// OOM kill is the reason, restart re-adopts through cgroups and ends strays.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "daemon/jobs/service.h"
#include "daemon/jobs/test_support.h"
#include "daemon/launch/launcher_fake.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

class ServiceTrackingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-tracking-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    launcher_.cgroups = true;
    Restart();
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Restart() {
    service_.reset();
    ServiceOptions o;
    o.state_dir = dir_;
    o.kill_grace_ms = 1000;
    service_ = std::make_unique<Service>(o, clock_, inventory_, launcher_, regions_);
    ASSERT_TRUE(service_->Start().ok());
  }
  core::Result<JobView> Submit(std::optional<std::string> cpus,
                               std::optional<std::string> host_mem) {
    SubmitSpec s;
    s.fields.mem = "1GiB";
    s.fields.cpus = cpus;
    s.fields.host_mem = host_mem;
    s.argv = {"train"};
    s.cwd = "/";
    Caller c;
    c.uid = c.gid = 1000;
    c.user = "u1000";
    return service_->intake().Submit(c, s);
  }

  std::string dir_;
  FakeClock clock_;
  FakeInventory inventory_{SimulatedGpus(1)};
  FakeLauncher launcher_;
  FakeRegionStore regions_;
  std::unique_ptr<Service> service_;
};

TEST_F(ServiceTrackingTest, HostLimitsReachTheLaunchAndSurviveARestart) {
  auto v = Submit("0.5", "64MiB");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const LaunchSpec& spec = launcher_.launches.at(v->job.pid);
  EXPECT_EQ(spec.job_id, v->job.id);
  EXPECT_EQ(spec.host_limits.cpu_milli, 500u);
  EXPECT_EQ(spec.host_limits.memory_bytes, 64ull << 20);
  Restart();
  auto back = service_->reads().Get(v->job.id);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->job.request.host_cpu_milli, 500u);
  EXPECT_EQ(back->job.request.host_memory_bytes, 64ull << 20);
}

TEST_F(ServiceTrackingTest, BadHostLimitsAreRefusedWithTheFlagNamed) {
  auto cpus = Submit("abc", std::nullopt);
  ASSERT_FALSE(cpus.ok());
  EXPECT_NE(cpus.status().message().find("--cpus"), std::string::npos);
  auto mem = Submit(std::nullopt, "1MiB");
  ASSERT_FALSE(mem.ok());
  EXPECT_NE(mem.status().message().find("--host-mem"), std::string::npos);
}

TEST_F(ServiceTrackingTest, AnOomKilledJobSaysSoAndItsCgroupIsReleased) {
  auto v = Submit(std::nullopt, "64MiB");
  ASSERT_TRUE(v.ok());
  int64_t pid = v->job.pid;
  launcher_.end_notes[pid] =
      "killed by the kernel's OOM killer: the job reached its host memory "
      "limit (--host-mem 64 MiB)";
  launcher_.Exit(pid, 137);
  service_->Tick();
  auto done = service_->reads().Get(v->job.id);
  EXPECT_EQ(done->job.state, core::JobState::kExited);
  EXPECT_EQ(done->job.exit_code, 137);
  EXPECT_NE(done->job.reason.find("OOM killer"), std::string::npos) << done->job.reason;
  EXPECT_EQ(launcher_.released, std::vector<int64_t>{pid});
}

TEST_F(ServiceTrackingTest, RestartAdoptsRunningJobsThroughTheLauncherAndEndsTheRest) {
  auto a = Submit(std::nullopt, std::nullopt);
  auto b = Submit(std::nullopt, std::nullopt);
  ASSERT_TRUE(a.ok() && b.ok());
  launcher_.Exit(b->job.pid, 0);
  service_->Tick();
  Restart();
  EXPECT_EQ(launcher_.adopted.at(a->job.id), a->job.pid);
  EXPECT_EQ(launcher_.adopted.count(b->job.id), 0u) << "an ended job is not adopted";
  EXPECT_EQ(launcher_.strays_kept, std::vector<uint64_t>{a->job.id});
  EXPECT_EQ(service_->reads().Get(a->job.id)->job.state, core::JobState::kRunning);
}

}  // namespace
}  // namespace gpuslice::daemon
