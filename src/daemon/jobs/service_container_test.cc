// What the Service does for containers (service_container.cc): the leader of
// a container job (`--image`) and its clean-up, the checks at submission, and
// a CDI spec per running job, over the fake launcher. The engine command and
// the spec's content alone: container_job_test.cc, cdi_test.cc.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "daemon/jobs/service.h"
#include "daemon/jobs/test_support.h"
#include "daemon/launch/cdi.h"
#include "daemon/launch/container_job.h"
#include "daemon/launch/launcher_fake.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool Has(const std::vector<std::string>& argv, const std::vector<std::string>& run) {
  return std::search(argv.begin(), argv.end(), run.begin(), run.end()) != argv.end();
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ContainerService : public ServiceFixture {
 protected:
  void SetUp() override {
    launcher_.cgroups = true;
    options_.podman = "/opt/podman";
    options_.podman_args = {"--runtime", "runc"};
    ServiceFixture::SetUp();
  }
  core::Result<JobView> Submit(std::optional<std::string> image,
                               std::optional<std::string> engine = std::nullopt,
                               core::JobMode mode = core::JobMode::kSubmit) {
    SubmitSpec s;
    s.fields.mem = "1GiB";
    s.argv = {"python", "train.py"};
    s.cwd = "/home/u";
    s.env = {"PATH=/home/u/bin", "DOCKER_HOST=tcp://evil"};
    s.mode = mode;
    s.image = std::move(image);
    s.engine = std::move(engine);
    return service_->intake().Submit(TestCaller(1000), s);
  }
};

TEST_F(ContainerService, ItsLeaderIsTheEnginesRunAsRootWithACleanEnvironment) {
  auto v = Submit("localhost/train:1");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const uint64_t id = v->job.id;
  ASSERT_EQ(State(id), core::JobState::kRunning);
  EXPECT_EQ(Get(id).job.image, "localhost/train:1");
  EXPECT_EQ(Get(id).job.engine, "podman");
  const LaunchSpec& spec = launcher_.launches.at(Get(id).job.pid);
  EXPECT_TRUE(spec.engine_as_root);
  EXPECT_EQ(spec.cwd, "/home/u");  // Entered with the caller's rights.
  ASSERT_FALSE(spec.argv.empty());
  EXPECT_EQ(spec.argv[0], "/opt/podman");
  EXPECT_TRUE(Has(spec.argv, {"--user", "1000:1000"}));
  EXPECT_TRUE(Has(spec.argv, {"--runtime", "runc"}));
  EXPECT_TRUE(Has(spec.argv, {"localhost/train:1", "python", "train.py"}));
  EXPECT_TRUE(Has(spec.argv, {"-e", "GPUSLICE_JOB_ID=" + std::to_string(id)}));
  // Nothing of the caller's environment reaches root's engine client.
  for (const std::string& e : spec.env) {
    EXPECT_EQ(e.find("DOCKER_HOST"), std::string::npos);
    EXPECT_NE(e, "PATH=/home/u/bin");
  }
  // Its end removes the container from the engine's store.
  launcher_.Exit(Get(id).job.pid, 0);
  service_->Tick();
  EXPECT_EQ(State(id), core::JobState::kExited);
  ASSERT_EQ(launcher_.helpers.size(), 1u);
  EXPECT_EQ(launcher_.helpers[0], (std::vector<std::string>{"/opt/podman", "rm", "-f", "--ignore",
                                                            "gpuslice-job-" + std::to_string(id)}));
  // The ledger keeps the image across a restart.
  Restart();
  EXPECT_EQ(Get(id).job.image, "localhost/train:1");
}

TEST_F(ContainerService, BadRequestsAreRefusedWithTheReasonAndNothingIsQueued) {
  EXPECT_NE(Submit("--privileged")
                .status()
                .message()
                .find("--image: '--privileged' is refused: it starts with '-'"),
            std::string::npos);
  EXPECT_NE(Submit("oci-archive:/etc/shadow")
                .status()
                .message()
                .find("--image: 'oci-archive:/etc/shadow' is refused: a transport prefix"),
            std::string::npos);
  EXPECT_EQ(Submit("x", "lxc").status().message(),
            "--engine: expected podman or docker, got 'lxc'");
  EXPECT_EQ(Submit(std::nullopt, "docker").status().message(), "--engine goes with --image");
  EXPECT_FALSE(Submit("x", std::nullopt, core::JobMode::kShell).ok());
  launcher_.cgroups = false;
  auto no_cgroups = Submit("x");
  ASSERT_FALSE(no_cgroups.ok());
  EXPECT_NE(no_cgroups.status().message().find("need the daemon to track jobs by cgroup"),
            std::string::npos);
  EXPECT_EQ(service_->table().queued_count() + service_->table().running_count(), 0u);
}

class CdiService : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-cdi-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

// The service: a spec from the moment a job starts (before its first
// process) to its end, with the slice's paths and environment.
TEST_F(CdiService, TheServiceKeepsASpecPerRunningJob) {
  FakeClock clock;
  FakeInventory inventory(SimulatedGpus(1));
  FakeLauncher launcher;
  FakeRegionStore regions;
  ServiceOptions o;
  o.state_dir = dir_ + "/state";
  o.shim_path = "/lib/libgpuslice.so";
  o.sim_lib_dir = "/lib/sim";
  o.coord_dir = "/state/coord";
  o.cdi_dir = dir_ + "/cdi";
  fs::create_directories(dir_ + "/run/sim");
  std::ofstream(dir_ + "/run/sim/state") << "state";
  o.job_env = {"GPUSLICE_SIM_STATE=" + dir_ + "/run/sim/state"};
  fs::create_directories(o.state_dir);
  Service service(o, clock, inventory, launcher, regions);
  ASSERT_TRUE(service.Start().ok());
  SubmitSpec s;
  s.fields.mem = "4GiB";
  s.argv = {"podman", "run"};
  s.cwd = "/home/u";
  auto v = service.intake().Submit(TestCaller(1000), s);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const JobView job = *service.reads().Get(v->job.id);
  ASSERT_EQ(job.job.state, core::JobState::kRunning);
  const std::string path = o.cdi_dir + "/" + CdiSpecFileName(job.job.id);
  ASSERT_TRUE(fs::exists(path));
  json spec = json::parse(Slurp(path));
  const json& e = spec["devices"][0]["containerEdits"];
  EXPECT_EQ(spec["devices"][0]["name"], std::to_string(job.job.id));
  auto has_env = [&](const std::string& kv) {
    return std::find(e["env"].begin(), e["env"].end(), kv) != e["env"].end();
  };
  EXPECT_TRUE(has_env("GPUSLICE_SLICE=" + job.job.region_path)) << e.dump();
  EXPECT_TRUE(has_env("GPUSLICE_LIMITS=" + regions.LimitsPathOf(job.job.region_path)));
  EXPECT_TRUE(has_env("CUDA_VISIBLE_DEVICES=GPU-0"));
  EXPECT_TRUE(has_env("LD_PRELOAD=/usr/lib/gpuslice/libgpuslice.so"));
  EXPECT_TRUE(has_env("GPUSLICE_SIM_STATE=" + dir_ + "/run/sim/state"));
  bool limits_ro = false, region_rw = false, sim_dir = false;
  for (const json& m : e["mounts"]) {
    if (m["hostPath"] == regions.LimitsPathOf(job.job.region_path)) {
      limits_ro = m["options"][0] == "ro";
    }
    if (m["hostPath"] == job.job.region_path) region_rw = m["options"][0] == "rw";
    sim_dir = sim_dir || m["hostPath"] == dir_ + "/run/sim";
  }
  EXPECT_TRUE(limits_ro) << e.dump();
  EXPECT_TRUE(region_rw) << e.dump();
  EXPECT_TRUE(sim_dir) << e.dump();
  EXPECT_FALSE(e.contains("deviceNodes")) << "the simulated GPU has no device nodes";
  // `container-args`: the same for its owner, not for another user.
  auto mine = service.setup().ContainerOf(TestCaller(1000), job.job.id);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  EXPECT_EQ(CdiSpec(*mine), spec);
  EXPECT_EQ(service.setup().ContainerOf(TestCaller(1001), job.job.id).status().code(),
            core::StatusCode::kPermissionDenied);
  EXPECT_TRUE(service.setup().ContainerOf(TestCaller(0, true), job.job.id).ok()) << "an admin";
  EXPECT_EQ(service.setup().ContainerOf(TestCaller(1000), 999).status().code(),
            core::StatusCode::kNotFound);
  // It ends: the spec goes, and there is no slice to join.
  ASSERT_TRUE(service.Cancel(TestCaller(1000), job.job.id).ok());
  launcher.Exit(job.job.pid, 143);
  clock.Advance(1000);
  service.Tick();
  EXPECT_FALSE(fs::exists(path));
  auto ended = service.setup().ContainerOf(TestCaller(1000), job.job.id);
  EXPECT_EQ(ended.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(ended.status().message().find("only a running job"), std::string::npos);
}

// A daemon in a container loads the driver under its driver root; the spec
// names the driver's libraries where the host has them, which is where the
// container engine looks.
TEST_F(CdiService, DriverLibrariesAreNamedByTheirHostPaths) {
  const std::string lib_dir = dir_ + "/driver-root/usr/lib/x86_64-linux-gnu";
  fs::create_directories(lib_dir);
  std::ofstream(lib_dir + "/libcuda.so.1") << "";
  std::ofstream(lib_dir + "/libnvidia-ml.so.1") << "";
  InventorySnapshot gpus = SimulatedGpus(1);
  gpus.source = "nvml";
  gpus.library = lib_dir + "/libnvidia-ml.so.1";
  gpus.host_library = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1";
  FakeClock clock;
  FakeInventory inventory(gpus);
  FakeLauncher launcher;
  FakeRegionStore regions;
  ServiceOptions o;
  o.state_dir = dir_ + "/state";
  o.shim_path = "/usr/local/gpuslice/libgpuslice.so";
  o.cdi_dir = dir_ + "/cdi";
  fs::create_directories(o.state_dir);
  Service service(o, clock, inventory, launcher, regions);
  ASSERT_TRUE(service.Start().ok());
  SubmitSpec s;
  s.fields.mem = "4GiB";
  s.argv = {"sleep", "1"};
  s.cwd = "/";
  auto v = service.intake().Submit(TestCaller(1000), s);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  auto slice = service.setup().ContainerOf(TestCaller(1000), v->job.id);
  ASSERT_TRUE(slice.ok()) << slice.status().ToString();
  std::map<std::string, std::string> mounts;
  for (const CdiMount& m : slice->mounts) mounts[m.container_path] = m.host_path;
  EXPECT_EQ(mounts["/usr/lib/gpuslice/driver/libcuda.so.1"],
            "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
  EXPECT_EQ(mounts["/usr/lib/gpuslice/driver/libnvidia-ml.so.1"],
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
  EXPECT_EQ(mounts["/usr/lib/gpuslice/libgpuslice.so"], "/usr/local/gpuslice/libgpuslice.so");
}

}  // namespace
}  // namespace gpuslice::daemon
