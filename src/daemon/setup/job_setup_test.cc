#include "daemon/setup/job_setup.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/units.h"
#include "daemon/launch/launcher_fake.h"

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::JobState;

bool Has(const std::vector<std::string>& env, const std::string& entry) {
  return std::find(env.begin(), env.end(), entry) != env.end();
}

// The value of `key` in `env` ("" when absent; the last one wins, as for
// execve's caller).
std::string ValueOf(const std::vector<std::string>& env, const std::string& key) {
  std::string out;
  for (const std::string& e : env) {
    if (e.rfind(key + "=", 0) == 0) out = e.substr(key.size() + 1);
  }
  return out;
}

Caller User(uint32_t uid, bool admin = false) {
  Caller c;
  c.uid = c.gid = uid;
  c.user = "u" + std::to_string(uid);
  c.admin = admin;
  return c;
}

// A JobSetup over a job table of its own, the fake slices and launcher, and
// the real external and container components (what Service gives it).
class JobSetupTest : public ::testing::Test {
 protected:
  JobSetupTest()
      : external_(kGidBase,
                  ExternalJobs::Jobs{
                      .for_each_running = [](const std::function<void(const Job&)>&) {},
                      .processes = []() -> ProcessTable& { return NoProcesses(); },
                      .finish = [](Job&, JobState, int, std::string) {},
                  },
                  launcher_),
        containers_(
            ContainerOptions(),
            ContainerJobs::Jobs{
                .inventory = [this]() -> const InventorySnapshot& { return inventory_; },
                .job_env = [this]() -> const std::vector<std::string>& { return job_env_; },
                .shared_gid = [this](const Job& job) { return external_.SharedGidOf(job); },
                .gpus_file = [](const Job&) { return std::string(); },
                .limits_path =
                    [this](const std::string& region) { return regions_.LimitsPathOf(region); },
                .gids_of = [](const std::string&,
                              uint32_t gid) { return std::vector<uint32_t>{gid}; },
                .for_each_running = [](const std::function<void(const Job&)>&) {},
            },
            launcher_),
        setup_({.jobs_dir = "/var/lib/gpuslice/jobs",
                .shim_path = "/opt/gpuslice/libgpuslice.so",
                .sim_lib_dir = "/opt/gpuslice/sim",
                .coord_dir = "/run/gpuslice/coord",
                .resume_on_demand = true},
               JobSetup::Hooks{
                   .job_env = [this]() -> const std::vector<std::string>& { return job_env_; },
                   .simulated = [this] { return simulated_; },
               },
               table_, regions_, external_, containers_, launcher_) {}

  static ContainerJobs::Options ContainerOptions() {
    ContainerJobs::Options options;
    options.shim_path = "/opt/gpuslice/libgpuslice.so";
    return options;
  }
  static ProcessTable& NoProcesses() {
    static FakeProcessTable procs;
    return procs;
  }

  // A running fraction of user `uid` on GPU-0 in its slice.
  Job& Running(uint64_t id, uint32_t uid, uint32_t compute_milli) {
    Job job;
    job.id = id;
    job.uid = job.gid = uid;
    job.user = "u" + std::to_string(uid);
    job.state = JobState::kRunning;
    job.request.kind = core::RequestKind::kFraction;
    job.request.name = "train";
    job.allocation.gpu_uuids = {"GPU-0"};
    job.allocation.memory_bytes_per_gpu = 8 * core::kGiB;
    job.allocation.compute_milli = compute_milli;
    job.region_path = "/fake/slice-" + std::to_string(id);
    job.env = {"HOME=/home/u", "LD_PRELOAD=/usr/lib/mine.so", "CUDA_VISIBLE_DEVICES=7"};
    Job& added = table_.Add(std::move(job));
    table_.live()[id];
    return added;
  }

  static constexpr uint32_t kGidBase = 2'000'000'000;
  JobTable table_;
  FakeRegionStore regions_;
  FakeLauncher launcher_;
  InventorySnapshot inventory_;
  std::vector<std::string> job_env_;
  bool simulated_ = false;
  ExternalJobs external_;
  ContainerJobs containers_;
  JobSetup setup_;
};

TEST_F(JobSetupTest, EnvironmentNamesTheSliceTheShimAndOnlyTheJobsGpus) {
  const Job& job = Running(7, 1000, 500);
  const std::vector<std::string> env = setup_.JobEnvironment(job);
  EXPECT_TRUE(Has(env, "HOME=/home/u")) << "the caller's own variables are kept";
  EXPECT_EQ(ValueOf(env, "CUDA_VISIBLE_DEVICES"), "GPU-0") << "the caller's choice is overridden";
  EXPECT_FALSE(Has(env, "CUDA_VISIBLE_DEVICES=7"));
  EXPECT_EQ(ValueOf(env, "GPUSLICE_JOB_ID"), "7");
  EXPECT_EQ(ValueOf(env, "GPUSLICE_SLICE"), "/fake/slice-7");
  EXPECT_EQ(ValueOf(env, "GPUSLICE_LIMITS"), "/fake/limits-7");
  EXPECT_EQ(ValueOf(env, "GPUSLICE_COORD_DIR"), "/run/gpuslice/coord");
  EXPECT_EQ(ValueOf(env, "LD_PRELOAD"), "/opt/gpuslice/libgpuslice.so:/usr/lib/mine.so")
      << "the shim first, the caller's preload after it";
  EXPECT_EQ(ValueOf(env, "LD_LIBRARY_PATH"), "") << "not simulated: no driver directory";
  EXPECT_EQ(ValueOf(env, "GPUSLICE_GPUS_FILE"), "") << "not elastic";
}

TEST_F(JobSetupTest, EnvironmentOfSimulatedGpusAddsTheDriverAndTheForcedVariablesLast) {
  Job& job = Running(8, 1000, 0);
  job.env.push_back("LD_LIBRARY_PATH=/usr/local/lib");
  job.env.push_back("GPUSLICE_SIM_GPUS=9");
  simulated_ = true;
  job_env_ = {"GPUSLICE_SIM_GPUS=2"};
  const std::vector<std::string> env = setup_.JobEnvironment(job);
  EXPECT_EQ(ValueOf(env, "LD_LIBRARY_PATH"), "/opt/gpuslice/sim:/usr/local/lib");
  EXPECT_EQ(
      std::count_if(env.begin(), env.end(),
                    [](const std::string& e) { return e.rfind("GPUSLICE_SIM_GPUS=", 0) == 0; }),
      1)
      << "a forced variable replaces the caller's";
  EXPECT_EQ(env.back(), "GPUSLICE_SIM_GPUS=2");
}

TEST_F(JobSetupTest, SliceLimitsOfAShareAreThatShare) {
  const Job& job = Running(9, 1000, 300);
  const SliceLimits limits = setup_.SliceLimitsOf(job);
  EXPECT_EQ(limits.job_id, 9u);
  EXPECT_EQ(limits.uid, 1000u);
  EXPECT_EQ(limits.name, "train");
  EXPECT_EQ(limits.uuids, std::vector<std::string>{"GPU-0"});
  EXPECT_EQ(limits.memory_bytes_per_device, 8 * core::kGiB);
  EXPECT_EQ(limits.compute_milli, 300u);
  EXPECT_FALSE(limits.no_share);
  EXPECT_FALSE(limits.launches_paused);
}

TEST_F(JobSetupTest, SliceLimitsWithoutAShareTakeTurnsWithTheSmallestShare) {
  const Job& job = Running(10, 1000, 0);
  const SliceLimits limits = setup_.SliceLimitsOf(job);
  EXPECT_EQ(limits.compute_milli, JobSetup::kShareOfNoShareMilli);
  EXPECT_TRUE(limits.work_conserving) << "alone it may use the whole GPU";
  EXPECT_TRUE(limits.no_share);

  SliceLimits whole;
  Job gpu = job;
  gpu.request.kind = core::RequestKind::kWholeGpus;
  JobSetup::TakeTurnsWithoutAShare(gpu, &whole);
  EXPECT_EQ(whole.compute_milli, 0u) << "a whole GPU shares with no one";
}

TEST_F(JobSetupTest, SliceLimitsOfAPausedOrSuspendedJobHoldItsLaunches) {
  Job& job = Running(11, 1000, 200);
  table_.live()[11].paused = true;
  EXPECT_TRUE(setup_.SliceLimitsOf(job).launches_paused) << "a pause survives a rewrite";

  table_.live()[11].paused = false;
  job.state = JobState::kSuspended;
  const SliceLimits suspended = setup_.SliceLimitsOf(job);
  EXPECT_TRUE(suspended.launches_paused);
  EXPECT_EQ(suspended.memory_bytes_per_device, 0u) << "its GPUs are others' now";
  EXPECT_NE(suspended.suspension, 0u) << "resume on demand: a CUDA call asks for a resume";
}

TEST_F(JobSetupTest, ContainerArgsAreRefusedForAnothersJobAndForAJobNotRunning) {
  Job& job = Running(12, 1000, 0);
  EXPECT_TRUE(setup_.ContainerOf(User(1000), 12).ok()) << "its owner";
  EXPECT_TRUE(setup_.ContainerOf(User(0, true), 12).ok()) << "an admin";
  EXPECT_EQ(setup_.ContainerOf(User(1001), 12).status().code(),
            core::StatusCode::kPermissionDenied);
  EXPECT_EQ(setup_.ContainerOf(User(1000), 999).status().code(), core::StatusCode::kNotFound);
  job.state = JobState::kExited;
  auto ended = setup_.ContainerOf(User(1000), 12);
  EXPECT_EQ(ended.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(ended.status().message().find("only a running job has a slice to join"),
            std::string::npos);
}

TEST_F(JobSetupTest, CgroupParentIsTheJobsCgroupButNoneForAnExternalJob) {
  Running(13, 1000, 0);
  Job& external = Running(14, 0, 0);
  external.mode = core::JobMode::kExternal;
  EXPECT_EQ(setup_.CgroupParentOf(13), "") << "without cgroups";
  launcher_.cgroups = true;
  EXPECT_EQ(setup_.CgroupParentOf(13), "/gpuslice/job-13");
  EXPECT_EQ(setup_.CgroupParentOf(14), "") << "nothing of an external job runs in our cgroups";
}

TEST_F(JobSetupTest, JobDirIsBelowTheJobsDirectoryByIdAndNamedInTheStartedText) {
  EXPECT_EQ(setup_.JobDir(42), "/var/lib/gpuslice/jobs/42");
  Job& job = Running(15, 1000, 0);
  job.allocation.gpu_uuids = {"GPU-0", "GPU-1"};
  job.pid = 4242;
  EXPECT_EQ(JobSetup::StartedText(job), "on GPU-0,GPU-1, pid 4242");
  job.allocation.gpu_uuids.clear();
  job.pid = 0;
  EXPECT_EQ(JobSetup::StartedText(job), "on -");
}

}  // namespace
}  // namespace gpuslice::daemon
