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

const std::string kSha = "sha256:" + std::string(64, 'a');

TEST(ContainerJob, PlainImageReferencesAreAccepted) {
  for (const std::string& name : {
           std::string("ubuntu"),
           std::string("ubuntu:22.04"),
           std::string("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"),
           std::string("localhost/gpuslice-e2e:bullseye"),
           std::string("localhost:5000/team/train:3"),
           std::string("registry.example.com/a/b/c"),
           std::string("docker.io/library/busybox:latest"),
           std::string("my_team__x/a.b-c---d:V1_x.y-z"),
           std::string("localhost/x@") + kSha,
           std::string("localhost/x:1@") + kSha,
           std::string("docker2/x"),      // Not a transport: the word before ':' is.
           std::string("Example.COM/x"),  // A host may have capitals.
           std::string(255, 'a'),
       }) {
    core::Status s = ValidateImageName(name);
    EXPECT_TRUE(s.ok()) << name << ": " << s.message();
  }
}

// Root's podman must not open what a user's --image names as root.
TEST(ContainerJob, ANameThatIsNotAPlainReferenceIsRefusedWithTheReason) {
  struct Case {
    std::string image;
    std::string reason;
  };
  const Case cases[] = {
      {"oci-archive:/etc/shadow", "a transport prefix ('oci-archive:')"},
      {"docker-archive:/root/x.tar", "a transport prefix ('docker-archive:')"},
      {"docker-archive:x.tar", "a transport prefix ('docker-archive:')"},  // Also a valid tag.
      {"dir:/root", "a transport prefix ('dir:')"},
      {"containers-storage:[overlay@/var/lib/x]img", "a transport prefix ('containers-storage:')"},
      {"docker://evil.example.com/x", "a transport prefix ('docker://')"},
      {"docker-daemon:x:1", "a transport prefix ('docker-daemon:')"},
      {"oci:/tmp/layout", "a transport prefix ('oci:')"},
      {"sif:/tmp/x.sif", "a transport prefix ('sif:')"},
      {"dir:5000/x", "a transport prefix ('dir:')"},
      {"https://evil/x", "a transport prefix ('https://')"},
      {"/etc/shadow", "a path (it starts with '/')"},
      {"/ubuntu", "a path (it starts with '/')"},
      {"./image.tar", "a path (it starts with '.')"},
      {"../../etc", "a path (it starts with '.')"},
      {"~root/x", "a path (it starts with '~')"},
      {"a/../../etc/shadow", "a path (a '..' component)"},
      {"a/./b", "a path (a '.' component)"},
      {"a//b", "a path (an empty component, '//')"},
      {"x/", "a path (an empty component, '//')"},
      {"-v", "it starts with '-' (an option of the engine's)"},
      {"--privileged", "it starts with '-' (an option of the engine's)"},
      {"ubuntu bash", "a character no image reference holds (' ')"},
      {"a;b", "a character no image reference holds (';')"},
      {"a\x1b[2J", "a character no image reference holds (0x1b)"},
      {"Ubuntu", "upper-case letters in the repository name ('Ubuntu')"},
      {"localhost/Train", "upper-case letters in the repository name ('Train')"},
      {"a-", "a repository name component ('a-')"},
      {"a..b", "a repository name component ('a..b')"},
      {"ubuntu:", "a tag that is not"},
      {"ubuntu:.x", "a tag that is not"},
      {"ubuntu:" + std::string(129, 't'), "a tag that is not"},
      {"x@sha256:0123abcd", "a digest that is not ALGORITHM:HEX"},
      {"x@" + std::string(64, 'a'), "a digest that is not ALGORITHM:HEX"},
      {"x@1sha:" + std::string(64, 'a'), "a digest that is not ALGORITHM:HEX"},
      {"x@sha256:" + std::string(63, 'a') + "g", "a digest that is not ALGORITHM:HEX"},
      {"localhost:port/x", "a registry host that is not HOST[:PORT] ('localhost:port')"},
      {"-host.com/x", "it starts with '-'"},
      {"a.-b.com/x", "a registry host that is not HOST[:PORT]"},
      {"a:b:c", "a ':' that is neither a tag's nor a registry port's"},
      {":tag", "no repository name"},
  };
  for (const Case& c : cases) {
    core::Status s = ValidateImageName(c.image);
    ASSERT_FALSE(s.ok()) << c.image;
    EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument) << c.image;
    EXPECT_NE(s.message().find("is refused: " + c.reason), std::string::npos)
        << c.image << ": " << s.message();
    EXPECT_NE(s.message().find("docs/CONTAINERS.md"), std::string::npos) << s.message();
  }
  EXPECT_EQ(ValidateImageName("").message(),
            "--image: an image name of 1 to 255 characters is needed");
  EXPECT_FALSE(ValidateImageName(std::string(256, 'a')).ok());
}

TEST(ContainerJob, EnginesAreNamedByWord) {
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
  EXPECT_TRUE(Has(a, {"--cgroup-manager", "cgroupfs", "run", "--rm", "--pull=never", "--replace"}));
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
  EXPECT_TRUE(
      Has(a, {"/usr/bin/docker", "run", "--rm", "--pull", "never", "--name", "gpuslice-job-12"}));
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
