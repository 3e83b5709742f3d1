// The caller's process pinned at accept, over real unix
// sockets and real processes.

#include "daemon/launch/peer_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>

#include "daemon/launch/launcher.h"

namespace gpuslice::daemon {
namespace {

// A listening unix socket in a temp directory.
class PeerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-peer-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    addr_.sun_family = AF_UNIX;
    std::strncpy(addr_.sun_path, (dir_ + "/s").c_str(), sizeof addr_.sun_path - 1);
    listener_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(listener_, 0);
    ASSERT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&addr_), sizeof addr_), 0);
    ASSERT_EQ(listen(listener_, 8), 0);
  }
  void TearDown() override {
    close(listener_);
    unlink(addr_.sun_path);
    rmdir(dir_.c_str());
  }
  // A child that connects, writes one byte once connected, then waits for
  // a byte on `go` before it exits. Returns its pid.
  pid_t ConnectingChild(int* ready, int* go) {
    int up[2], down[2];
    if (pipe(up) != 0 || pipe(down) != 0) return -1;
    const pid_t pid = fork();
    if (pid == 0) {
      close(up[0]);
      close(down[1]);
      const int s = socket(AF_UNIX, SOCK_STREAM, 0);
      if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&addr_), sizeof addr_) != 0) _exit(1);
      char b = 'c';
      if (write(up[1], &b, 1) != 1 || read(down[0], &b, 1) < 0) _exit(2);
      _exit(0);
    }
    close(up[1]);
    close(down[0]);
    *ready = up[0];
    *go = down[1];
    char b;
    if (read(*ready, &b, 1) != 1) return -1;
    return pid;
  }

  std::string dir_;
  sockaddr_un addr_{};
  int listener_ = -1;
};

TEST_F(PeerProcessTest, PinsTheProcessAtTheOtherEndWithWhatProcSaidOfIt) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  auto pinned = PinPeerProcess(fds[0]);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_EQ((*pinned)->pid(), getpid());
  EXPECT_EQ((*pinned)->identity().real_uid, getuid());
  EXPECT_EQ((*pinned)->identity().start_time, ProcessStartTime(getpid()));
  EXPECT_TRUE((*pinned)->CheckRunning().ok());
  close(fds[0]);
  close(fds[1]);
}

TEST_F(PeerProcessTest, AConnectionOutlivingItsProcessSpeaksForNobody) {
  int ready = -1, go = -1;
  const pid_t child = ConnectingChild(&ready, &go);
  ASSERT_GT(child, 0);
  const int conn = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(conn, 0);
  auto pinned = PinPeerProcess(conn);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_EQ((*pinned)->pid(), child);
  EXPECT_TRUE((*pinned)->CheckRunning().ok());
  // It ends; not reaped yet (a zombie), then reaped.
  ASSERT_EQ(write(go, "x", 1), 1);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, child, &info, WEXITED | WNOWAIT), 0);
  core::Status zombie = (*pinned)->CheckRunning();
  EXPECT_EQ(zombie.code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(zombie.message().find("(pid " + std::to_string(child) + ") has ended"),
            std::string::npos)
      << zombie.message();
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_FALSE((*pinned)->CheckRunning().ok());
  close(conn);
  close(ready);
  close(go);
}

TEST_F(PeerProcessTest, AProcessThatEndedBeforeTheAcceptIsNotPinned) {
  int ready = -1, go = -1;
  const pid_t child = ConnectingChild(&ready, &go);
  ASSERT_GT(child, 0);
  ASSERT_EQ(write(go, "x", 1), 1);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  const int conn = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(conn, 0);
  auto pinned = PinPeerProcess(conn);
  ASSERT_FALSE(pinned.ok());
  EXPECT_EQ(pinned.status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(pinned.status().message().find("has ended"), std::string::npos)
      << pinned.status().message();
  close(conn);
  close(ready);
  close(go);
}

// Kernels without SO_PEERPIDFD: the pid SO_PEERCRED gave is opened by
// number, so the process found there must have the connection's ids.
TEST_F(PeerProcessTest, WithoutSoPeerPidfdTheProcessAtThePidMustHaveTheConnectionsIds) {
  auto same = PinProcessByPid(getpid(), geteuid(), getegid());
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ((*same)->identity().start_time, ProcessStartTime(getpid()));
  auto other = PinProcessByPid(getpid(), geteuid() + 1, getegid());
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(other.status().message().find("is not the process that opened this connection"),
            std::string::npos)
      << other.status().message();
  EXPECT_EQ(PinProcessByPid(0, 0, 0).status().code(), core::StatusCode::kNotFound);
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  ASSERT_EQ(waitpid(gone, nullptr, 0), gone);
  EXPECT_EQ(PinProcessByPid(gone, geteuid(), getegid()).status().code(),
            core::StatusCode::kPermissionDenied);
}

// The daemon gets SIGCHLD whenever a job ends, on whichever thread is
// checking a caller at that moment: poll(2) fails with EINTR then, even with
// a zero timeout, and the caller was refused ("poll: Interrupted system
// call") though it was running.
TEST_F(PeerProcessTest, ASignalDuringTheCheckDoesNotRefuseARunningCaller) {
  struct sigaction sa {};
  sa.sa_handler = [](int) {};
  sa.sa_flags = SA_RESTART;  // poll(2) is never restarted, even so.
  struct sigaction old {};
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  auto self = PinProcessByPid(getpid(), geteuid(), getegid());
  ASSERT_TRUE(self.ok()) << self.status().ToString();
  const pthread_t checker = pthread_self();
  std::atomic<bool> stop{false};
  std::thread signaller([&] {
    while (!stop.load()) pthread_kill(checker, SIGUSR1);
  });
  int refused = 0;
  std::string first;
  for (int i = 0; i < 20000; ++i) {
    core::Status s = (*self)->CheckRunning();
    if (!s.ok() && refused++ == 0) first = s.message();
  }
  stop = true;
  signaller.join();
  sigaction(SIGUSR1, &old, nullptr);
  EXPECT_EQ(refused, 0) << first;
}

}  // namespace
}  // namespace gpuslice::daemon
