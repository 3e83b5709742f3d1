// Cgroup detection and paths against fake sysfs trees in a temp dir: a
// mountinfo file that points into the tree, directories standing for the
// hierarchies, and the control files the kernel would show.

#include "daemon/launch/cgroup.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// This machine's mountinfo (v1 controllers + a controller-less v2).
constexpr char kHybridMountinfo[] =
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
    "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
    "38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

TEST(CgroupMounts, ParsesAHybridMachine) {
  CgroupMounts m = ParseCgroupMounts(kHybridMountinfo);
  EXPECT_EQ(m.unified, "/sys/fs/cgroup/unified");
  EXPECT_EQ(m.v1.at("cpu"), "/sys/fs/cgroup/cpu");
  EXPECT_EQ(m.v1.at("memory"), "/sys/fs/cgroup/memory");
  EXPECT_EQ(m.v1.at("pids"), "/sys/fs/cgroup/pids");
  EXPECT_EQ(m.v1.at("freezer"), "/sys/fs/cgroup/freezer");
  EXPECT_EQ(m.v1.count("name=systemd"), 0u);  // A named hierarchy has no controller.
}

TEST(CgroupMounts, ComountedControllersShareTheirMountAndReadOnlyOrBoundSubtreesAreSkipped) {
  CgroupMounts m = ParseCgroupMounts(
      "25 24 0:22 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
      "26 24 0:23 / /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n"
      "27 24 0:24 /docker/abc /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n"
      "28 24 0:25 / /sys/fs/cgroup/unified rw shared:9 - cgroup2 cgroup2 rw,nsdelegate\n");
  EXPECT_EQ(m.v1.at("cpu"), "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(m.v1.at("cpuacct"), "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(m.v1.count("memory"), 0u);
  EXPECT_EQ(m.v1.count("pids"), 0u);
  EXPECT_EQ(m.unified, "/sys/fs/cgroup/unified");  // Optional fields before "-" are skipped.
}

class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-cgroup-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  // A hierarchy mounted at root_/DIR.
  void MountV1(const std::string& dir, const std::string& controllers) {
    fs::create_directories(root_ / dir);
    ++n_;
    mountinfo_ << "3" << n_ << " 30 0:2" << n_ << " / " << (root_ / dir).string()
               << " rw,relatime - cgroup cgroup rw," << controllers << "\n";
  }
  void MountV2(const std::string& dir, const std::string& controllers) {
    fs::create_directories(root_ / dir);
    Write(root_ / dir / "cgroup.controllers", controllers + "\n");
    Write(root_ / dir / "cgroup.subtree_control", "");
    // What the kernel shows in a new non-root cgroup (our base).
    for (const char* f : {"cgroup.procs", "cgroup.events", "cgroup.freeze", "cgroup.kill"}) {
      Write(root_ / dir / "gpuslice" / f, "");
    }
    if (controllers.find("cpu") != std::string::npos) Write(root_ / dir / "gpuslice/cpu.max", "");
    if (controllers.find("memory") != std::string::npos) {
      Write(root_ / dir / "gpuslice/memory.max", "");
    }
    ++n_;
    mountinfo_ << "4" << n_ << " 30 0:3" << n_ << " / " << (root_ / dir).string()
               << " rw,relatime - cgroup2 cgroup2 rw\n";
  }
  SysCgroups::Options Options() {
    Write(root_ / "mountinfo", mountinfo_.str());
    SysCgroups::Options o;
    o.mountinfo_path = (root_ / "mountinfo").string();
    return o;
  }

  fs::path root_;
  std::ostringstream mountinfo_;
  int n_ = 0;
};

TEST_F(FakeSysfs, HybridTracksThroughV2AndLimitsThroughV1) {
  for (const char* c : {"cpu", "cpuacct", "memory", "freezer", "pids"}) MountV1(c, c);
  MountV2("unified", "");  // No controllers: they are all bound to v1.
  SysCgroups cg(Options());
  ASSERT_TRUE(cg.available()) << cg.Describe();
  EXPECT_EQ(cg.layout(), CgroupLayout::kHybrid);
  EXPECT_EQ(cg.Describe().rfind("cgroup hybrid (tracking v2, freezer v2, cpu v1, memory v1)", 0),
            0u)
      << cg.Describe();
  EXPECT_EQ(cg.TrackingDir("job-7"), (root_ / "unified/gpuslice/job-7").string());

  auto procs = cg.Create("job-7", HostLimits{500, 64ull << 20});
  ASSERT_TRUE(procs.ok()) << procs.status().message();
  std::vector<std::string> want = {(root_ / "unified/gpuslice/job-7/cgroup.procs").string(),
                                   (root_ / "cpu/gpuslice/job-7/cgroup.procs").string(),
                                   (root_ / "memory/gpuslice/job-7/cgroup.procs").string()};
  EXPECT_EQ(*procs, want);
  EXPECT_EQ(Read(root_ / "cpu/gpuslice/job-7/cpu.cfs_period_us"), "100000");
  EXPECT_EQ(Read(root_ / "cpu/gpuslice/job-7/cpu.cfs_quota_us"), "50000");
  EXPECT_EQ(Read(root_ / "memory/gpuslice/job-7/memory.limit_in_bytes"), "67108864");

  // A job without limits joins only the tracking hierarchy (v2 also freezes).
  auto plain = cg.Create("job-8", HostLimits{});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->size(), 1u);
  EXPECT_FALSE(fs::exists(root_ / "cpu/gpuslice/job-8"));

  // Tracking reads v2's cgroup.events; killing writes cgroup.kill.
  Write(root_ / "unified/gpuslice/job-7/cgroup.events", "populated 1\nfrozen 0\n");
  EXPECT_TRUE(cg.Populated("job-7"));
  Write(root_ / "unified/gpuslice/job-7/cgroup.events", "populated 0\nfrozen 0\n");
  EXPECT_FALSE(cg.Populated("job-7"));
  Write(root_ / "unified/gpuslice/job-7/cgroup.kill", "");
  EXPECT_TRUE(cg.Kill("job-7").ok());
  EXPECT_EQ(Read(root_ / "unified/gpuslice/job-7/cgroup.kill"), "1");
  EXPECT_TRUE(cg.Freeze("job-7", true).ok());
  EXPECT_EQ(Read(root_ / "unified/gpuslice/job-7/cgroup.freeze"), "1");

  // The v1 memory controller counts OOM kills in memory.oom_control.
  Write(root_ / "memory/gpuslice/job-7/memory.oom_control",
        "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
  EXPECT_FALSE(cg.OomKilled("job-7"));
  Write(root_ / "memory/gpuslice/job-7/memory.oom_control",
        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n");
  EXPECT_TRUE(cg.OomKilled("job-7"));

  EXPECT_EQ(cg.List(), (std::vector<std::string>{"job-7", "job-8"}));
  EXPECT_TRUE(cg.Exists("job-8"));
  EXPECT_FALSE(cg.Exists("job-9"));

  // A container started with --cgroup-parent=<the job's cgroup> lives in a
  // child cgroup (its engine's): its processes are the job's.
  Write(root_ / "unified/gpuslice/job-7/cgroup.procs", "11\n");
  Write(root_ / "unified/gpuslice/job-7/libpod-abc/cgroup.procs", "12\n13\n");
  Write(root_ / "unified/gpuslice/job-7/libpod-abc/sub/cgroup.procs", "14\n");
  std::vector<int64_t> pids = cg.Pids("job-7");
  std::sort(pids.begin(), pids.end());
  EXPECT_EQ(pids, (std::vector<int64_t>{11, 12, 13, 14}));
  // Removal takes the engine's leftover (empty) cgroups first.
  fs::create_directories(root_ / "unified/gpuslice/job-8/libpod-def/conmon");
  EXPECT_TRUE(cg.Remove("job-8").ok());
  EXPECT_FALSE(fs::exists(root_ / "unified/gpuslice/job-8"));
}

TEST_F(FakeSysfs, V2OnlyEnablesItsControllersAndWritesV2Limits) {
  MountV2("cg", "cpuset cpu io memory pids");
  SysCgroups cg(Options());
  ASSERT_TRUE(cg.available()) << cg.Describe();
  EXPECT_EQ(cg.layout(), CgroupLayout::kV2);
  EXPECT_NE(cg.Describe().find("tracking v2, freezer v2, cpu v2, memory v2"), std::string::npos)
      << cg.Describe();
  // The controllers reach job cgroups only when the root and our base pass
  // them down.
  EXPECT_EQ(Read(root_ / "cg/cgroup.subtree_control"), "+cpu +memory");
  EXPECT_EQ(Read(root_ / "cg/gpuslice/cgroup.subtree_control"), "+cpu +memory");
  auto procs = cg.Create("job-3", HostLimits{1500, 1ull << 30});
  ASSERT_TRUE(procs.ok()) << procs.status().message();
  EXPECT_EQ(*procs, std::vector<std::string>{(root_ / "cg/gpuslice/job-3/cgroup.procs").string()});
  EXPECT_EQ(Read(root_ / "cg/gpuslice/job-3/cpu.max"), "150000 100000");
  EXPECT_EQ(Read(root_ / "cg/gpuslice/job-3/memory.max"), "1073741824");
  EXPECT_EQ(Read(root_ / "cg/gpuslice/job-3/memory.swap.max"), "0");
  Write(root_ / "cg/gpuslice/job-3/memory.events", "low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\n");
  EXPECT_TRUE(cg.OomKilled("job-3"));
  // Removal: rmdir, as on the real file system (here the fake files keep
  // the directory, so it fails like a populated cgroup would).
  EXPECT_FALSE(cg.Remove("job-3").ok());
}

TEST_F(FakeSysfs, V1OnlyTracksThroughPidsAndFreezesThroughTheFreezer) {
  for (const char* c : {"cpu,cpuacct", "memory", "freezer", "pids"}) MountV1(c, c);
  SysCgroups cg(Options());
  ASSERT_TRUE(cg.available()) << cg.Describe();
  EXPECT_EQ(cg.layout(), CgroupLayout::kV1);
  EXPECT_NE(cg.Describe().find("tracking v1, freezer v1, cpu v1, memory v1"), std::string::npos)
      << cg.Describe();
  auto procs = cg.Create("job-1", HostLimits{250, 0});
  ASSERT_TRUE(procs.ok()) << procs.status().message();
  std::vector<std::string> want = {(root_ / "pids/gpuslice/job-1/cgroup.procs").string(),
                                   (root_ / "freezer/gpuslice/job-1/cgroup.procs").string(),
                                   (root_ / "cpu,cpuacct/gpuslice/job-1/cgroup.procs").string()};
  EXPECT_EQ(*procs, want);
  EXPECT_EQ(Read(root_ / "cpu,cpuacct/gpuslice/job-1/cpu.cfs_quota_us"), "25000");
  // Membership is the pids hierarchy's cgroup.procs.
  Write(root_ / "pids/gpuslice/job-1/cgroup.procs", "");
  EXPECT_FALSE(cg.Populated("job-1"));
  Write(root_ / "pids/gpuslice/job-1/cgroup.procs", "4242\n4243\n");
  EXPECT_TRUE(cg.Populated("job-1"));
  EXPECT_EQ(cg.Pids("job-1"), (std::vector<int64_t>{4242, 4243}));
  EXPECT_TRUE(cg.Freeze("job-1", true).ok());
  EXPECT_EQ(Read(root_ / "freezer/gpuslice/job-1/freezer.state"), "FROZEN");
  EXPECT_TRUE(cg.Freeze("job-1", false).ok());
  EXPECT_EQ(Read(root_ / "freezer/gpuslice/job-1/freezer.state"), "THAWED");
}

TEST_F(FakeSysfs, ALimitWithoutItsControllerIsAClearError) {
  MountV1("pids", "pids");
  SysCgroups cg(Options());
  ASSERT_TRUE(cg.available());
  auto procs = cg.Create("job-2", HostLimits{0, 64ull << 20});
  ASSERT_FALSE(procs.ok());
  EXPECT_NE(procs.status().message().find("--host-mem needs the memory cgroup controller"),
            std::string::npos);
  EXPECT_TRUE(cg.Create("job-2", HostLimits{}).ok());
}

TEST_F(FakeSysfs, NoUsableHierarchyMeansUnavailableAndSaysWhy) {
  SysCgroups none(Options());
  EXPECT_FALSE(none.available());
  EXPECT_EQ(none.layout(), CgroupLayout::kNone);
  EXPECT_NE(none.Describe().find("process group"), std::string::npos) << none.Describe();
  EXPECT_FALSE(none.Create("job-1", {}).ok());

  // A hierarchy whose directory cannot be made (here: missing) is unusable.
  mountinfo_ << "50 30 0:50 / " << (root_ / "gone").string()
             << " rw - cgroup2 cgroup2 rw\n";
  SysCgroups broken(Options());
  EXPECT_FALSE(broken.available());
  EXPECT_NE(broken.Describe().find("mkdir"), std::string::npos) << broken.Describe();

  SysCgroups::Options off = Options();
  off.enabled = false;
  EXPECT_NE(SysCgroups(off).Describe().find("cgroups = off"), std::string::npos);
}

TEST(Cgroup, CpuQuotaIsPerHundredMillisecondsAndAtLeastOneMillisecond) {
  EXPECT_EQ(CpuQuotaUs(500), 50'000u);
  EXPECT_EQ(CpuQuotaUs(2000), 200'000u);
  EXPECT_EQ(CpuQuotaUs(10), 1'000u);
  EXPECT_EQ(CpuQuotaUs(1), 1'000u);
}

}  // namespace
}  // namespace gpuslice::daemon
