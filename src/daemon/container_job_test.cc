// Container jobs (`--image`): the engine command, the checks at submission,
// and what the Service launches and cleans up, over the fake launcher.

#include "daemon/container_job.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "daemon/test_support.h"

namespace gpuslice::daemon {
namespace {

bool Has(const std::vector<std::string>& argv, const std::vector<std::string>& run) {
  return std::search(argv.begin(), argv.end(), run.begin(), run.end()) != argv.end();
}

TEST(ContainerJob, ImageNamesAreEngineReferencesNeverOptions) {
  EXPECT_TRUE(ValidateImageName("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime").ok());
  EXPECT_TRUE(ValidateImageName("localhost/x@sha256:0123abcd").ok());
  EXPECT_FALSE(ValidateImageName("").ok());
  EXPECT_FALSE(ValidateImageName("--privileged").ok());
  EXPECT_FALSE(ValidateImageName("ubuntu bash").ok());
  EXPECT_FALSE(ValidateImageName("a;b").ok());
  EXPECT_FALSE(ValidateImageName(std::string(256, 'a')).ok());
  EXPECT_EQ(ValidateImageName("-v").message(),
            "--image: '-v' is not an image name (it starts with '-')");
  EXPECT_TRUE(ParseContainerEngine("docker").ok());
  EXPECT_EQ(ParseContainerEngine("lxc").status().message(),
            "--engine: expected podman or docker, got 'lxc'");
}

TEST(ContainerJob, TheSliceAsPlainFlags) {
  CdiSlice s;
  s.device_nodes = {"/dev/nvidia0"};
  s.mounts = {{"/lib/shim.so", "/usr/lib/gpuslice/libgpuslice.so", true},
              {"/run/slice", "/run/slice", false}};
  s.env = {"GPUSLICE_JOB_ID=3"};
  auto flags = ContainerSliceFlags(s);
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(*flags, (std::vector<std::string>{"--device", "/dev/nvidia0", "-v",
                                              "/lib/shim.so:/usr/lib/gpuslice/libgpuslice.so:ro",
                                              "-v", "/run/slice:/run/slice", "-e",
                                              "GPUSLICE_JOB_ID=3"}));
  s.mounts.push_back({"/a:b", "/a:b", true});
  EXPECT_FALSE(ContainerSliceFlags(s).ok());
}

TEST(ContainerJob, ACallersContainerRunsAsThemWithoutPrivilegesInTheJobsCgroup) {
  ContainerRun r;
  r.engine_path = "/usr/bin/podman";
  r.engine_args = {"--runtime", "runc"};
  r.uid = 1000;
  r.gid = 1000;
  r.groups = {1000, 27};
  r.cwd = "/home/u/proj";
  r.cgroup_parent = "/gpuslice/job-12";
  r.slice_flags = {"-e", "GPUSLICE_JOB_ID=12"};
  r.image = "localhost/train:1";
  r.command = {"python", "train.py"};
  std::vector<std::string> a = ContainerCommand(r);
  ASSERT_GE(a.size(), 4u);
  EXPECT_EQ(a[0], "/usr/bin/podman");
  EXPECT_TRUE(Has(a, {"--cgroup-manager", "cgroupfs", "run", "--rm", "--replace"}));
  EXPECT_TRUE(Has(a, {"--name", "gpuslice-job-12"}));
  EXPECT_TRUE(Has(a, {"--cgroup-parent", "/gpuslice/job-12"}));
  EXPECT_TRUE(Has(a, {"--user", "1000:1000", "--group-add", "27"}));
  EXPECT_TRUE(Has(a, {"--cap-drop", "all", "--security-opt", "no-new-privileges"}));
  EXPECT_TRUE(Has(a, {"-v", "/home/u/proj:/home/u/proj", "-w", "/home/u/proj"}));
  // The admin's words, then the slice, then the image and the command last.
  EXPECT_TRUE(Has(a, {"--runtime", "runc", "-e", "GPUSLICE_JOB_ID=12", "localhost/train:1",
                      "python", "train.py"}));
  EXPECT_EQ(a.back(), "train.py");

  // Root asked for root: kept. Docker: no podman-only flags.
  r.uid = r.gid = 0;
  r.engine = ContainerEngine::kDocker;
  r.engine_path = "/usr/bin/docker";
  a = ContainerCommand(r);
  EXPECT_TRUE(Has(a, {"/usr/bin/docker", "run", "--rm", "--name", "gpuslice-job-12"}));
  EXPECT_TRUE(Has(a, {"--user", "0:0"}));
  EXPECT_FALSE(Has(a, {"--cap-drop"}));
  EXPECT_FALSE(Has(a, {"--replace"}));
}

TEST(ContainerJob, NamesComeFromTheJobsCgroupSoTwoDaemonsNeverShareOne) {
  EXPECT_EQ(ContainerName("/gpuslice/job-12"), "gpuslice-job-12");
  EXPECT_EQ(ContainerName("/gpuslice-e2e-x1/job-12"), "gpuslice-e2e-x1-job-12");
  EXPECT_EQ(ContainerName("/a b/job-1"), "a-b-job-1");
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
    return service_->Submit(TestCaller(1000), s);
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
  EXPECT_EQ(Submit("--privileged").status().message(),
            "--image: '--privileged' is not an image name (it starts with '-')");
  EXPECT_EQ(Submit("x", "lxc").status().message(), "--engine: expected podman or docker, got 'lxc'");
  EXPECT_EQ(Submit(std::nullopt, "docker").status().message(), "--engine goes with --image");
  EXPECT_FALSE(Submit("x", std::nullopt, core::JobMode::kShell).ok());
  launcher_.cgroups = false;
  auto no_cgroups = Submit("x");
  ASSERT_FALSE(no_cgroups.ok());
  EXPECT_NE(no_cgroups.status().message().find("need the daemon to track jobs by cgroup"),
            std::string::npos);
  EXPECT_EQ(service_->queued_count() + service_->running_count(), 0u);
}

}  // namespace
}  // namespace gpuslice::daemon
