// The real launcher: its supervisor relays output into capped logs and
// writes the exit status; with the machine's real cgroups (root only, else
// skipped) a job's setsid children stay in the job and die with it.

#include "daemon/launch/launcher.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <thread>

#include "daemon/launch/cgroup_fake.h"
#include "daemon/launch/job_log.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

std::string Read(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool WaitFor(const std::function<bool()>& pred, double seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-launcher-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  LaunchSpec Spec(const std::string& script, uint64_t job_id = 0) {
    LaunchSpec s;
    s.argv = {"/bin/sh", "-c", script};
    s.cwd = "/";
    s.env = {"PATH=/usr/bin:/bin"};
    s.uid = geteuid();
    s.gid = getegid();
    s.stdout_path = dir_ + "/stdout";
    s.stderr_path = dir_ + "/stderr";
    s.status_path = dir_ + "/status";
    s.job_id = job_id;
    return s;
  }
  // Polls like the daemon: reaps, then asks whether the job lives.
  bool EndsWithin(Launcher& l, int64_t pgid, double seconds) {
    return WaitFor([&] {
      l.Reap();
      return !l.GroupAlive(pgid);
    }, seconds);
  }
  std::string dir_;
};

TEST_F(LauncherTest, SupervisorRelaysOutputAndWritesTheStatusAfterIt) {
  RealLauncher l;
  auto ref = l.Launch(Spec("echo out; echo err >&2; printf tail; exit 3"));
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  ASSERT_TRUE(EndsWithin(l, ref->pid, 10));
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir_ + "/status"); }, 10));
  // The status comes after the output, so whoever sees it has all output.
  EXPECT_EQ(Read(dir_ + "/stdout"), "out\ntail");
  EXPECT_EQ(Read(dir_ + "/stderr"), "err\n");
  EXPECT_EQ(ReadExitStatusFile(dir_ + "/status"), 3);
}

TEST_F(LauncherTest, LogIsCappedWithANote) {
  RealLauncher l(LauncherOptions{nullptr, kMinLogCap});
  // 3x the cap, in lines.
  auto ref = l.Launch(Spec("i=0; while [ $i -lt 4000 ]; do "
                           "echo line-$i-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa; i=$((i+1)); done"));
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  ASSERT_TRUE(EndsWithin(l, ref->pid, 30));
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir_ + "/status"); }, 10));
  std::string log = Read(dir_ + "/stdout");
  EXPECT_LE(log.size(), kMinLogCap);
  LogTrim t = ParseLogTrim(log.data(), log.size());
  EXPECT_GT(t.dropped, 0u) << log.substr(0, 100);
  EXPECT_NE(log.find("line-3999-"), std::string::npos);
  EXPECT_EQ(log.find("line-0-"), std::string::npos);
}

TEST_F(LauncherTest, HostLimitsWithoutCgroupsAreRefused) {
  RealLauncher l;
  LaunchSpec s = Spec("true", 5);
  s.host_limits.cpu_milli = 500;
  auto ref = l.Launch(s);
  ASSERT_FALSE(ref.ok());
  EXPECT_NE(ref.status().message().find("need cgroups"), std::string::npos);
}

// The launcher's use of cgroups, over FakeCgroups (any user).
TEST_F(LauncherTest, LeaderJoinsItsCgroupBeforeExecAndTheCgroupDecidesLiveness) {
  FakeCgroups cg(dir_);
  RealLauncher l({&cg, 0});
  EXPECT_TRUE(l.UsesCgroups());
  EXPECT_EQ(l.Tracking(), "cgroup fake");
  LaunchSpec s = Spec("exit 0", 9);
  s.host_limits = {500, 64ull << 20};
  cg.populated.insert("job-9");
  auto ref = l.Launch(s);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  ASSERT_EQ(cg.created.count("job-9"), 1u);
  EXPECT_EQ(cg.created["job-9"].cpu_milli, 500u);
  EXPECT_EQ(cg.created["job-9"].memory_bytes, 64ull << 20);
  EXPECT_EQ(Read(cg.ProcsFile("job-9")), "0") << "the leader wrote itself in before exec";
  // The leader is gone; the cgroup still holds a process.
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir_ + "/status"); }, 10));
  EXPECT_TRUE(l.GroupAlive(ref->pid));
  ASSERT_TRUE(l.SignalGroup(ref->pid, SIGTERM).ok());
  EXPECT_EQ(cg.signals, (std::vector<std::pair<std::string, int>>{{"job-9", SIGTERM}}));
  ASSERT_TRUE(l.StopGroup(ref->pid, true).ok());
  EXPECT_TRUE(cg.frozen["job-9"]);
  ASSERT_TRUE(l.SignalGroup(ref->pid, SIGKILL).ok());  // The whole cgroup.
  EXPECT_EQ(cg.kills, std::vector<std::string>{"job-9"});
  EXPECT_FALSE(l.GroupAlive(ref->pid));
  cg.oom_killed.insert("job-9");
  EXPECT_EQ(l.EndNote(ref->pid),
            "killed by the kernel's OOM killer: the job reached its host memory limit "
            "(--host-mem 64 MiB)");
  l.Release(ref->pid);
  EXPECT_EQ(cg.removed, std::vector<std::string>{"job-9"});
  EXPECT_EQ(l.EndNote(ref->pid), "") << "forgotten once released";
}

TEST_F(LauncherTest, ACgroupThatCannotBeMadeFailsTheLaunchAndUnavailableCgroupsFallBack) {
  FakeCgroups cg(dir_);
  cg.create_error = core::PermissionDeniedError("mkdir: Permission denied");
  RealLauncher l({&cg, 0});
  auto ref = l.Launch(Spec("true", 3));
  ASSERT_FALSE(ref.ok());
  EXPECT_EQ(ref.status().message(), "cannot set up the job's cgroup: mkdir: Permission denied");

  FakeCgroups off(dir_);
  off.is_available = false;
  RealLauncher fallback({&off, 0});
  EXPECT_FALSE(fallback.UsesCgroups());
  EXPECT_EQ(fallback.Tracking(), "process groups (cgroups unavailable (fake))");
  auto plain = fallback.Launch(Spec("true", 3));
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_TRUE(off.created.empty());
  EXPECT_TRUE(EndsWithin(fallback, plain->pid, 10));
}

// With the machine's cgroups (root only).
class CgroupLauncherTest : public LauncherTest {
 protected:
  void SetUp() override {
    LauncherTest::SetUp();
    if (geteuid() != 0) GTEST_SKIP() << "needs root for cgroups";
    SysCgroups::Options o;
    o.base = "gpuslice-unit-" + std::to_string(getpid());
    cgroups_ = std::make_unique<SysCgroups>(o);
    if (!cgroups_->available()) GTEST_SKIP() << cgroups_->Describe();
  }
  void TearDown() override {
    if (cgroups_ && cgroups_->available()) {
      RealLauncher l({cgroups_.get(), 0});
      l.EndStrays({});
      // The base directories themselves.
      for (const char* m : {"unified", "pids", "freezer", "cpu", "memory", ""}) {
        std::string base = std::string("/sys/fs/cgroup/") + m + (*m ? "/" : "") + "gpuslice-unit-" +
                           std::to_string(getpid());
        rmdir(base.c_str());
      }
    }
    LauncherTest::TearDown();
  }
  std::unique_ptr<SysCgroups> cgroups_;
};

// A child that calls setsid leaves the process group, not the job.
TEST_F(CgroupLauncherTest, SetsidChildKeepsTheJobAliveUntilItEnds) {
  RealLauncher l({cgroups_.get(), 0});
  auto ref = l.Launch(Spec("setsid sh -c 'sleep 2; echo escapee-done' & echo leader-done", 41));
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  // The leader ends at once; its process group empties, the job does not.
  ASSERT_TRUE(WaitFor([&] { return kill(-static_cast<pid_t>(ref->pid), 0) != 0; }, 10));
  l.Reap();
  EXPECT_TRUE(l.GroupAlive(ref->pid));
  EXPECT_FALSE(fs::exists(dir_ + "/status"));  // Its output is not all in yet.
  ASSERT_TRUE(EndsWithin(l, ref->pid, 20));
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir_ + "/status"); }, 10));
  EXPECT_EQ(Read(dir_ + "/stdout"), "leader-done\nescapee-done\n");
  EXPECT_EQ(ReadExitStatusFile(dir_ + "/status"), 0);
  EXPECT_TRUE(l.EndNote(ref->pid).empty());
  l.Release(ref->pid);
  EXPECT_FALSE(cgroups_->Exists("job-41"));
}

TEST_F(CgroupLauncherTest, KillEndsDoubleForkedDaemonisedChildren) {
  RealLauncher l({cgroups_.get(), 0});
  auto ref = l.Launch(Spec(
      "(setsid sh -c 'sleep 60 & sleep 60' </dev/null >/dev/null 2>&1 &); echo $$; sleep 60", 42));
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  ASSERT_TRUE(WaitFor([&] { return cgroups_->Pids("job-42").size() >= 4; }, 10))
      << cgroups_->Pids("job-42").size();
  std::vector<int64_t> pids = cgroups_->Pids("job-42");
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(l.SignalGroup(ref->pid, SIGKILL).ok());
  ASSERT_TRUE(EndsWithin(l, ref->pid, 2));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  for (int64_t pid : pids) {
    l.Reap();
    EXPECT_TRUE(kill(static_cast<pid_t>(pid), 0) != 0 || ProcessStartTime(pid) == 0) << pid;
  }
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir_ + "/status"); }, 10));
  EXPECT_EQ(ReadExitStatusFile(dir_ + "/status"), 128 + SIGKILL);
}

TEST_F(CgroupLauncherTest, ARestartedLauncherAdoptsTheJobAndEndsStrays) {
  int64_t pid = 0;
  {
    RealLauncher first({cgroups_.get(), 0});
    auto a = first.Launch(Spec("setsid sleep 60 & exit 0", 43));
    ASSERT_TRUE(a.ok()) << a.status().message();
    pid = a->pid;
    LaunchSpec other = Spec("sleep 60", 44);
    other.stdout_path = dir_ + "/stdout2";
    other.stderr_path = dir_ + "/stderr2";
    other.status_path = dir_ + "/status2";
    ASSERT_TRUE(first.Launch(other).ok());
  }
  // A new daemon: job 43 is running in its ledger, job 44 is not.
  RealLauncher second({cgroups_.get(), 0});
  EXPECT_TRUE(second.Adopt(43, pid));
  EXPECT_FALSE(second.Adopt(45, 999999));
  second.Reap();
  EXPECT_TRUE(second.GroupAlive(pid));  // The escapee, though the leader is gone.
  EXPECT_EQ(second.EndStrays({43}), std::vector<std::string>{"job-44"});
  EXPECT_FALSE(cgroups_->Exists("job-44"));
  ASSERT_TRUE(second.SignalGroup(pid, SIGKILL).ok());
  EXPECT_TRUE(EndsWithin(second, pid, 2));
}

TEST_F(CgroupLauncherTest, StopGroupFreezesEveryProcessOfTheJob) {
  RealLauncher l({cgroups_.get(), 0});
  auto ref = l.Launch(Spec("setsid sh -c 'while :; do echo x; sleep 0.05; done' & sleep 60", 46));
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir_ + "/stdout") && fs::file_size(dir_ + "/stdout") > 4; }, 10));
  ASSERT_TRUE(l.StopGroup(ref->pid, true).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto size = fs::file_size(dir_ + "/stdout");
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(fs::file_size(dir_ + "/stdout"), size);  // Stopped: no output.
  ASSERT_TRUE(l.StopGroup(ref->pid, false).ok());
  EXPECT_TRUE(WaitFor([&] { return fs::file_size(dir_ + "/stdout") > size; }, 5));
  ASSERT_TRUE(l.SignalGroup(ref->pid, SIGKILL).ok());
  EXPECT_TRUE(EndsWithin(l, ref->pid, 2));
}

}  // namespace
}  // namespace gpuslice::daemon
