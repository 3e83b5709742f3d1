#include "daemon/containers/container_jobs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "daemon/launch/launcher_fake.h"

namespace gpuslice::daemon {
namespace {

using core::Job;

bool Has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The job table as the component sees it: running jobs and what it asks.
class ContainerJobsTest : public ::testing::Test {
 protected:
  ContainerJobsTest() {
    dir_ = std::filesystem::temp_directory_path() /
           ("container_jobs_test." + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    inventory_.source = "simulated";
    launcher_.cgroups = true;
  }
  ~ContainerJobsTest() override { std::filesystem::remove_all(dir_); }

  ContainerJobs Make(std::string cdi_dir = "") {
    ContainerJobs::Options o;
    o.shim_path = "/opt/gpuslice/libgpuslice.so";
    o.coord_dir = "/run/gpuslice/coord";
    o.cdi_dir = std::move(cdi_dir);
    ContainerJobs::Jobs j;
    j.inventory = [this]() -> const InventorySnapshot& { return inventory_; };
    j.job_env = [this]() -> const std::vector<std::string>& { return job_env_; };
    j.shared_gid = [](const Job& job) { return job.id == 7 ? 5007u : 0u; };
    j.gpus_file = [](const Job& job) { return job.id == 8 ? std::string("/state/8/gpus") : ""; };
    j.limits_path = [](const std::string& region) { return region + ".limits"; };
    j.gids_of = [](const std::string&, uint32_t gid) { return std::vector<uint32_t>{gid}; };
    j.for_each_running = [this](const std::function<void(const Job&)>& visit) {
      for (const Job& job : running_) visit(job);
    };
    return ContainerJobs(o, j, launcher_);
  }
  static Job Running(uint64_t id) {
    Job job;
    job.id = id;
    job.state = core::JobState::kRunning;
    job.user = "alice";
    job.uid = job.gid = 1000;
    job.region_path = "/state/jobs/" + std::to_string(id) + "/region";
    job.allocation.gpu_uuids = {"GPU-a"};
    job.allocation.gpu_indices = {0};
    return job;
  }

  std::filesystem::path dir_;
  InventorySnapshot inventory_;
  std::vector<std::string> job_env_ = {"GPUSLICE_SIM_GPUS=1"};
  std::vector<Job> running_;
  FakeLauncher launcher_;
};

TEST_F(ContainerJobsTest, ASliceCarriesTheJobsEnvironmentMountsAndTheForcedVariablesAsTheyAreNow) {
  ContainerJobs c = Make();
  CdiSlice s = c.SliceOf(Running(3));
  EXPECT_TRUE(Has(s.env, "CUDA_VISIBLE_DEVICES=GPU-a"));
  EXPECT_TRUE(Has(s.env, "GPUSLICE_JOB_ID=3"));
  EXPECT_TRUE(Has(s.env, "GPUSLICE_SLICE=/state/jobs/3/region"));
  EXPECT_TRUE(Has(s.env, "GPUSLICE_LIMITS=/state/jobs/3/region.limits"));
  EXPECT_TRUE(Has(s.env, "GPUSLICE_COORD_DIR=/run/gpuslice/coord"));
  EXPECT_TRUE(Has(s.env, "GPUSLICE_SIM_GPUS=1"));
  EXPECT_TRUE(s.additional_gids.empty());
  job_env_.push_back("GPUSLICE_SIM_X=2");  // The daemon changed them.
  EXPECT_TRUE(Has(c.SliceOf(Running(3)).env, "GPUSLICE_SIM_X=2"));
}

TEST_F(ContainerJobsTest, AnExternalJobsGroupAndAnElasticJobsGpuFileGoIntoItsSlice) {
  ContainerJobs c = Make();
  EXPECT_EQ(c.SliceOf(Running(7)).additional_gids, std::vector<uint32_t>{5007});
  CdiSlice elastic = c.SliceOf(Running(8));
  EXPECT_TRUE(Has(elastic.env, "GPUSLICE_GPUS_FILE=/state/8/gpus"));
  EXPECT_TRUE(std::any_of(elastic.mounts.begin(), elastic.mounts.end(),
                          [](const CdiMount& m) { return m.host_path == "/state/8/gpus"; }));
}

TEST_F(ContainerJobsTest, SpecsAreWrittenOnlyOnceOpenedAndHoldExactlyTheRunningJobs) {
  const std::string cdi = (dir_ / "cdi").string();
  ContainerJobs c = Make(cdi);
  running_ = {Running(3), Running(4)};
  c.SyncCdi();
  EXPECT_FALSE(std::filesystem::exists(cdi + "/" + CdiSpecFileName(3))) << "not before start";
  c.OpenCdi();
  ASSERT_TRUE(c.cdi_enabled());
  c.SyncCdi();
  EXPECT_TRUE(std::filesystem::exists(cdi + "/" + CdiSpecFileName(3)));
  EXPECT_TRUE(std::filesystem::exists(cdi + "/" + CdiSpecFileName(4)));
  running_ = {Running(4)};
  c.SyncCdi();
  EXPECT_FALSE(std::filesystem::exists(cdi + "/" + CdiSpecFileName(3)));
  c.RemoveCdi(4);
  EXPECT_FALSE(std::filesystem::exists(cdi + "/" + CdiSpecFileName(4)));
}

TEST_F(ContainerJobsTest, ASubmissionsImageIsCheckedAndSetOnTheJob) {
  ContainerJobs c = Make();
  Job job;
  EXPECT_TRUE(c.CheckSpec(std::nullopt, std::nullopt, false, "/home/a", &job).ok());
  EXPECT_TRUE(job.image.empty());
  EXPECT_EQ(c.CheckSpec(std::nullopt, "docker", false, "/home/a", &job).code(),
            core::StatusCode::kInvalidArgument)
      << "--engine without --image";
  EXPECT_EQ(c.CheckSpec("localhost/train:1", std::nullopt, true, "/home/a", &job).code(),
            core::StatusCode::kInvalidArgument)
      << "a shell job is not started by the daemon";
  EXPECT_EQ(c.CheckSpec("localhost/train:1", std::nullopt, false, "/home/a:b", &job).code(),
            core::StatusCode::kInvalidArgument);
  ASSERT_TRUE(c.CheckSpec("localhost/train:1", "docker", false, "/home/a", &job).ok());
  EXPECT_EQ(job.image, "localhost/train:1");
  EXPECT_EQ(job.engine, "docker");
  launcher_.cgroups = false;
  core::Status s = c.CheckSpec("localhost/train:1", std::nullopt, false, "/home/a", &job);
  EXPECT_EQ(s.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("cgroup"), std::string::npos) << s.message();
}

TEST_F(ContainerJobsTest, AContainerJobsLeaderIsTheEngineRunUnderTheJobsCgroup) {
  ContainerJobs c = Make();
  Job job = Running(5);
  job.image = "localhost/train:1";
  job.engine = "podman";
  job.argv = {"python", "train.py"};
  auto argv = c.Argv(job);
  ASSERT_TRUE(argv.ok()) << argv.status().ToString();
  EXPECT_EQ(argv->front(), "/usr/bin/podman");
  EXPECT_TRUE(Has(*argv, "localhost/train:1"));
  EXPECT_EQ(argv->back(), "train.py");
  launcher_.cgroups = false;
  EXPECT_EQ(c.Argv(job).status().code(), core::StatusCode::kFailedPrecondition);
}

TEST_F(ContainerJobsTest, AnEndedContainerJobsContainerIsRemovedByName) {
  ContainerJobs c = Make();
  Job job = Running(5);
  job.image = "localhost/train:1";
  job.engine = "podman";
  c.RemoveContainer(job);
  ASSERT_EQ(launcher_.helpers.size(), 1u);
  const std::vector<std::string>& rm = launcher_.helpers[0];
  EXPECT_EQ(rm[0], "/usr/bin/podman");
  EXPECT_EQ(rm[1], "rm");
  EXPECT_TRUE(Has(rm, "--ignore"));
  EXPECT_TRUE(Has(ContainerJobs::EngineEnvironment(), "HOME=/root"));
}

}  // namespace
}  // namespace gpuslice::daemon
