// Container jobs (`--image`): the engine command and the checks at
// submission (what the Service launches and cleans up: service_container_test.cc).

#include "daemon/launch/container_job.h"

#include <gtest/gtest.h>

#include <algorithm>


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

}  // namespace
}  // namespace gpuslice::daemon
