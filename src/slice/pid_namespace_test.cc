#include "slice/base/pid_namespace.h"

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "slice/region/region.h"

namespace gpuslice::slice {
namespace {

// What a process in its own PID namespace knows of itself.
struct Inside {
  uint64_t ns = 0;
  pid_t pid = 0;
  uint64_t start = 0;
  Liveness host_dead = Liveness::kAlive;  // How it sees a dead process of the host.
};

// A child in a new PID namespace (pid 1 there), as a container's process
// is; it reports what it knows of itself and waits to be killed. Needs
// root (CAP_SYS_ADMIN): the test is skipped without it.
class OtherNamespace : public ::testing::Test {
 protected:
  void SetUp() override {
    // A dead host process for the child to judge: this test's own child.
    dead_ = fork();
    if (dead_ == 0) _exit(0);
    dead_start_ = StartTimeOf(dead_);
    waitpid(dead_, nullptr, 0);

    // A slice region the inner process joins, as a container's does.
    char dir[] = "/tmp/pidns-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    RegionOptions o;
    o.name = "test";
    o.devices.push_back({"GPU-00000000-0000-0000-0000-000000000001", uint64_t{1} << 30});
    ASSERT_TRUE(Region::Create(dir_ + "/region", o).ok());

    int report[2], go[2];
    ASSERT_EQ(pipe(report), 0);
    ASSERT_EQ(pipe(go), 0);
    outer_ = fork();
    ASSERT_GE(outer_, 0);
    if (outer_ == 0) {
      // Only the test may hold the write end of `go`: its closing is the signal.
      close(go[1]);
      close(report[0]);
      if (unshare(CLONE_NEWPID) != 0) _exit(errno == EPERM ? 77 : 1);
      pid_t inner = fork();
      if (inner < 0) _exit(1);
      if (inner == 0) {
        Inside me{OwnPidNamespace(), getpid(), OwnStartTime(),
                  LivenessOf(kInitPidNamespace, dead_, dead_start_)};
        auto region = Region::Open(dir_ + "/region");
        if (!region.ok() || !(*region)->ClaimSlot(me.pid, me.start).ok()) _exit(1);
        if (write(report[1], &me, sizeof(me)) != sizeof(me)) _exit(1);
        char c;
        (void)!read(go[0], &c, 1);  // Until the test closes it.
        _exit(0);
      }
      int status = 0;
      waitpid(inner, &status, 0);
      _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
    }
    close(report[1]);
    close(go[0]);
    go_ = go[1];
    ssize_t n = read(report[0], &inside_, sizeof(inside_));
    close(report[0]);
    if (n != sizeof(inside_)) {
      int status = 0;
      waitpid(outer_, &status, 0);
      outer_ = -1;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 77) GTEST_SKIP() << "needs CAP_SYS_ADMIN";
      FAIL() << "the child in a new PID namespace did not report";
    }
  }
  void TearDown() override {
    Finish();
    if (!dir_.empty()) {
      unlink((dir_ + "/region").c_str());
      rmdir(dir_.c_str());
    }
  }

  // Lets the inner process exit and waits for it (and its parent).
  void Finish() {
    if (go_ >= 0) close(go_);
    go_ = -1;
    if (outer_ > 0) waitpid(outer_, nullptr, 0);
    outer_ = -1;
  }

  std::string dir_;
  pid_t dead_ = 0;
  uint64_t dead_start_ = 0;
  pid_t outer_ = -1;
  int go_ = -1;
  Inside inside_;
};

TEST_F(OtherNamespace, TheHostFindsTheProcessByItsNamespacePid) {
  EXPECT_EQ(inside_.pid, 1);
  EXPECT_NE(inside_.ns, OwnPidNamespace());
  ASSERT_NE(inside_.start, 0u);
  pid_t host = VisiblePid(inside_.ns, inside_.pid, inside_.start);
  ASSERT_GT(host, 1);
  EXPECT_EQ(StartTimeOf(host), inside_.start);
  EXPECT_EQ(LivenessOf(inside_.ns, inside_.pid, inside_.start), Liveness::kAlive);
  // Not the host's pid 1, nor another start time.
  EXPECT_EQ(VisiblePid(inside_.ns, inside_.pid, inside_.start + 1), 0);
  Finish();
  // Gone: the host (the initial namespace) sees it is.
  if (OwnPidNamespace() == kInitPidNamespace) {
    EXPECT_EQ(LivenessOf(inside_.ns, inside_.pid, inside_.start), Liveness::kDead);
  }
  EXPECT_EQ(VisiblePid(inside_.ns, inside_.pid, inside_.start), 0);
}

TEST_F(OtherNamespace, InsideANamespaceAHostProcessIsNeverJudgedDead) {
  // It cannot tell a dead host process from one it may not see.
  EXPECT_EQ(inside_.host_dead, Liveness::kUnknown);
}

TEST_F(OtherNamespace, TheRegionNamesItByTheHostPidAndKeepsItsSlotWhileItLives) {
  auto region = Region::Open(dir_ + "/region");
  ASSERT_TRUE(region.ok());
  pid_t host = VisiblePid(inside_.ns, inside_.pid, inside_.start);
  ASSERT_GT(host, 1);
  auto processes = (*region)->Processes();
  ASSERT_EQ(processes.size(), 1u);
  EXPECT_EQ(processes[0].pid, host);  // Not 1: the host's init.
  // The host's pid 1 lives but is not it; nor is its pid 1 judged dead.
  EXPECT_EQ((*region)->Sweep(RealProcessProbe()), 0u);
  EXPECT_EQ((*region)->Processes().size(), 1u);
  Finish();
  if (OwnPidNamespace() != kInitPidNamespace) GTEST_SKIP() << "not in the initial namespace";
  EXPECT_EQ((*region)->Sweep(RealProcessProbe()), 1u);
  EXPECT_TRUE((*region)->Processes().empty());
}

TEST(PidNamespace, OwnRecordsUseThePidAsIs) {
  const uint64_t me = OwnPidNamespace();
  ASSERT_NE(me, 0u);
  EXPECT_EQ(VisiblePid(me, getpid(), OwnStartTime()), getpid());
  EXPECT_EQ(VisiblePid(0, getpid(), OwnStartTime()), getpid());  // An older build's record.
  EXPECT_EQ(LivenessOf(me, getpid(), OwnStartTime()), Liveness::kAlive);
  EXPECT_EQ(LivenessOf(me, getpid(), OwnStartTime() + 1), Liveness::kDead);  // Reused pid.
  EXPECT_EQ(StartTimeOf(getpid()), OwnStartTime());
}

}  // namespace
}  // namespace gpuslice::slice
