// CDI specs: their content and their files (the service
// keeping one per running job: service_container_test.cc).
// tests/e2e/cdi_podman_e2e_test.cc runs a real podman against them.

#include "daemon/launch/cdi.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>


namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CdiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-cdi-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

CdiSlice Slice(uint64_t id) {
  CdiSlice s;
  s.job_id = id;
  s.device_nodes = {"/dev/nvidia0", "/dev/nvidiactl"};
  s.mounts = {{"/state/jobs/12/slice", "/state/jobs/12/slice", false},
              {"/state/limits/12", "/state/limits/12", true}};
  s.env = {"GPUSLICE_JOB_ID=" + std::to_string(id), "LD_PRELOAD=/usr/lib/gpuslice/libgpuslice.so"};
  return s;
}

TEST_F(CdiTest, TheSpecNamesTheJobAndMountsTheLimitsReadOnly) {
  json spec = CdiSpec(Slice(12));
  EXPECT_EQ(spec["cdiVersion"], "0.5.0");
  EXPECT_EQ(spec["kind"], "gpuslice.dev/slice");
  ASSERT_EQ(spec["devices"].size(), 1u);
  const json& d = spec["devices"][0];
  EXPECT_EQ(d["name"], "12");
  const json& e = d["containerEdits"];
  EXPECT_EQ(e["deviceNodes"],
            json::parse(R"([{"path":"/dev/nvidia0"},{"path":"/dev/nvidiactl"}])"));
  EXPECT_EQ(e["env"][0], "GPUSLICE_JOB_ID=12");
  ASSERT_EQ(e["mounts"].size(), 2u);
  EXPECT_EQ(e["mounts"][0]["options"], json::parse(R"(["rw","nosuid","nodev","bind"])"));
  EXPECT_EQ(e["mounts"][1]["options"], json::parse(R"(["ro","nosuid","nodev","bind"])"));
  EXPECT_EQ(e["mounts"][1]["containerPath"], "/state/limits/12");
  // No device nodes (the simulated GPU): no deviceNodes key at all.
  CdiSlice sim = Slice(3);
  sim.device_nodes.clear();
  EXPECT_FALSE(CdiSpec(sim)["devices"][0]["containerEdits"].contains("deviceNodes"));
}

TEST_F(CdiTest, SpecsFollowTheRunningJobsAndStaleOnesAreSwept) {
  const std::string cdi = dir_ + "/cdi";
  fs::create_directories(cdi);
  // Left by an earlier daemon: one of ours for a job that is gone, and
  // someone else's spec, which stays.
  std::ofstream(cdi + "/gpuslice-99.json") << "{}";
  std::ofstream(cdi + "/nvidia.json") << "{}";
  CdiSpecs specs(cdi);
  ASSERT_TRUE(specs.Sync({{12, Slice(12)}, {13, Slice(13)}}).ok());
  EXPECT_FALSE(fs::exists(cdi + "/gpuslice-99.json"));
  EXPECT_TRUE(fs::exists(cdi + "/nvidia.json"));
  json written = json::parse(Slurp(cdi + "/gpuslice-12.json"));
  EXPECT_EQ(written, CdiSpec(Slice(12)));
  struct stat st {};
  ASSERT_EQ(stat((cdi + "/gpuslice-12.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u) << "engines of other users read it";
  EXPECT_FALSE(fs::exists(cdi + "/gpuslice-12.json.tmp"));
  // Job 12 ends, 13 changes.
  CdiSlice changed = Slice(13);
  changed.env.push_back("CUDA_VISIBLE_DEVICES=GPU-1");
  ASSERT_TRUE(specs.Sync({{13, changed}}).ok());
  EXPECT_FALSE(fs::exists(cdi + "/gpuslice-12.json"));
  EXPECT_EQ(json::parse(Slurp(cdi + "/gpuslice-13.json")), CdiSpec(changed));
  // Off: nothing is written.
  CdiSpecs off("");
  EXPECT_TRUE(off.Sync({{14, Slice(14)}}).ok());
  EXPECT_FALSE(fs::exists(cdi + "/gpuslice-14.json"));
}

TEST_F(CdiTest, AnUnwritableDirectoryIsAnErrorNamingIt) {
  std::ofstream(dir_ + "/file") << "x";
  CdiSpecs specs(dir_ + "/file/cdi");
  core::Status s = specs.Write(Slice(1));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir_ + "/file/cdi"), std::string::npos) << s.message();
}

// Engines trust every spec in the folder: it is made 0755 whatever the
// umask, and one others can write is refused, naming it.
TEST_F(CdiTest, TheFolderIsNeverWritableByOthers) {
  const mode_t old = umask(0);
  CdiSpecs made(dir_ + "/run/cdi");
  EXPECT_TRUE(made.Write(Slice(1)).ok());
  umask(old);
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/run/cdi").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  const std::string open = dir_ + "/open";
  fs::create_directories(open);
  chmod(open.c_str(), 0777);
  CdiSpecs specs(open);
  core::Status s = specs.Write(Slice(2));
  EXPECT_EQ(s.code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find(open), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(open + "/gpuslice-2.json"));
}

// The simulated GPU's state folder is mounted read-write into containers
// only when it holds the state file alone: never a folder where a daemon's
// socket or state dir also sits.
TEST_F(CdiTest, TheSimulatorsFolderIsMountedOnlyWhenItHoldsNothingElse) {
  fs::create_directories(dir_ + "/own");
  std::ofstream(dir_ + "/own/state") << "state";
  auto own = SimStateMount(dir_ + "/own/state");
  ASSERT_TRUE(own.has_value());
  EXPECT_EQ(own->host_path, dir_ + "/own");
  EXPECT_EQ(own->container_path, dir_ + "/own");
  EXPECT_FALSE(own->read_only);

  fs::create_directories(dir_ + "/shared/state-dir");
  std::ofstream(dir_ + "/shared/state") << "state";
  std::ofstream(dir_ + "/shared/gpuslice.sock") << "";
  auto shared = SimStateMount(dir_ + "/shared/state");
  ASSERT_TRUE(shared.has_value());
  EXPECT_EQ(shared->host_path, dir_ + "/shared/state") << "the file alone, not its folder";
  EXPECT_FALSE(shared->read_only);

  EXPECT_FALSE(SimStateMount(dir_ + "/own/missing").has_value());
  EXPECT_FALSE(SimStateMount("state").has_value());
}

// A MIG job on a real GPU needs its instance's capability nodes: the GPU
// instance's and the compute instance's "access" minors, from the driver's
// /proc/driver/nvidia-caps/mig-minors (format as the driver writes it).
TEST(MigCapabilities, TheInstancesAccessNodesAndNoOthers) {
  const std::string minors =
      "config 1\nmonitor 2\n"
      "gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu0/gi1/ci1/access 14\n"
      "gpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\n"
      "gpu1/gi1/access 147\ngpu1/gi1/ci0/access 148\nbroken line\ngpu0/gi3/access x\n";
  EXPECT_EQ(MigCapabilityNodes(minors, 0, 1, 0),
            (std::vector<std::string>{"/dev/nvidia-caps/nvidia-cap12",
                                      "/dev/nvidia-caps/nvidia-cap13"}));
  EXPECT_EQ(MigCapabilityNodes(minors, 1, 1, 0),
            (std::vector<std::string>{"/dev/nvidia-caps/nvidia-cap147",
                                      "/dev/nvidia-caps/nvidia-cap148"}));
  EXPECT_EQ(MigCapabilityNodes(minors, 0, 2, 0).size(), 2u);
  EXPECT_TRUE(MigCapabilityNodes(minors, 0, 3, 0).empty());  // Not a number: nothing.
  EXPECT_TRUE(MigCapabilityNodes("", 0, 1, 0).empty());
}

}  // namespace
}  // namespace gpuslice::daemon
