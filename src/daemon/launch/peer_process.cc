#include "daemon/launch/peer_process.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "daemon/launch/launcher.h"

// Linux 6.5; Debian 12's headers do not have it yet.
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

namespace gpuslice::daemon {
namespace {

std::string Ended(pid_t pid) {
  return "the process that opened this connection (pid " + std::to_string(pid) +
         ") has ended: a connection speaks only for the running process that opened it "
         "(its pid may name another process now); connect again (docs/SECURITY.md)";
}

// The ids of /proc/<pid>/status ("Uid:\treal\teffective\tsaved\tfs").
struct ProcIds {
  uint32_t real_uid = 0, euid = 0, egid = 0;
};

bool ReadIds(pid_t pid, ProcIds* ids) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  bool uid = false, gid = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Uid:", 0) == 0) {
      std::istringstream f(line.substr(4));
      uid = static_cast<bool>(f >> ids->real_uid >> ids->euid);
    } else if (line.rfind("Gid:", 0) == 0) {
      std::istringstream f(line.substr(4));
      uint32_t real_gid = 0;
      gid = static_cast<bool>(f >> real_gid >> ids->egid);
    }
  }
  return uid && gid;
}

class PidfdPeerProcess : public PeerProcess {
 public:
  PidfdPeerProcess(PeerIdentity identity, int pidfd) : PeerProcess(identity), pidfd_(pidfd) {}
  ~PidfdPeerProcess() override { close(pidfd_); }
  PidfdPeerProcess(const PidfdPeerProcess&) = delete;
  PidfdPeerProcess& operator=(const PidfdPeerProcess&) = delete;

  core::Status CheckRunning() const override {
    // A pidfd polls readable once its process has ended (a zombie
    // included), and names that process for good: a pid reused since is
    // another process, which this pidfd never names.
    // A signal pending on this thread (the daemon's SIGCHLD when a job
    // ends) makes even a zero-timeout poll fail with EINTR, and poll(2) is
    // never restarted: ask again rather than refuse the caller.
    pollfd p{pidfd_, POLLIN, 0};
    int n;
    do {
      n = poll(&p, 1, 0);
    } while (n < 0 && errno == EINTR);
    if (n == 0) return core::Status::Ok();
    if (n < 0) {
      return core::PermissionDeniedError(
          "cannot tell whether the process that opened this "
          "connection (pid " +
          std::to_string(pid()) + ") still runs: poll: " + std::strerror(errno));
    }
    return core::PermissionDeniedError(Ended(pid()));
  }

 private:
  int pidfd_;
};

// Reads the identity of `pid` through the pinned `pidfd` (owned by the
// result, closed on error): the reads count only if the pinned process is
// still running after them, since its pid could not have named another
// process meanwhile. With `expect`, the process must show those effective
// ids (the pidfd was opened by pid number after the connect).
core::Result<std::unique_ptr<PeerProcess>> Identify(int pidfd, pid_t pid, const ucred* expect) {
  ProcIds ids;
  const bool read = ReadIds(pid, &ids);
  PeerIdentity identity{pid, ids.real_uid, ProcessStartTime(pid)};
  auto process = std::make_unique<PidfdPeerProcess>(identity, pidfd);
  if (!read || identity.start_time == 0 || !process->CheckRunning().ok()) {
    return core::PermissionDeniedError(Ended(pid));
  }
  if (expect != nullptr && (ids.euid != expect->uid || ids.egid != expect->gid)) {
    return core::PermissionDeniedError(
        "pid " + std::to_string(pid) + " is not the process that opened this connection (uid " +
        std::to_string(expect->uid) + " connected; the pid names a process of uid " +
        std::to_string(ids.euid) + " now): it ended and its pid was reused; connect again");
  }
  return std::unique_ptr<PeerProcess>(std::move(process));
}

core::Status PidfdError(const char* what, pid_t pid, int err) {
  if (err == ESRCH) return core::PermissionDeniedError(Ended(pid));
  if (err == EMFILE || err == ENFILE) {
    return core::ResourceExhaustedError("gpusliced is out of file descriptors; try again later");
  }
  return core::UnavailableError(std::string(what) + " of pid " + std::to_string(pid) + ": " +
                                std::strerror(err));
}

}  // namespace

core::Result<std::unique_ptr<PeerProcess>> PinProcessByPid(pid_t pid, uint32_t euid,
                                                           uint32_t egid) {
  if (pid <= 0) {
    return core::NotFoundError("the process that opened this connection is not visible here");
  }
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return PidfdError("pidfd_open", pid, errno);
  ucred expect{pid, euid, egid};
  return Identify(fd, pid, &expect);
}

core::Result<std::unique_ptr<PeerProcess>> PinPeerProcess(int socket_fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return core::UnavailableError(std::string("SO_PEERCRED: ") + std::strerror(errno));
  }
  if (cred.pid <= 0) {
    return core::NotFoundError("the process that opened this connection is not visible here");
  }
  // SO_PEERPIDFD names the very process that connected, with no window. A
  // kernel without it answers ENOPROTOOPT (EINVAL on some).
  int fd = -1;
  len = sizeof fd;
  if (getsockopt(socket_fd, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) == 0 && fd >= 0) {
    return Identify(fd, cred.pid, nullptr);
  }
  if (errno != ENOPROTOOPT && errno != EINVAL) return PidfdError("SO_PEERPIDFD", cred.pid, errno);
  return PinProcessByPid(cred.pid, cred.uid, cred.gid);
}

}  // namespace gpuslice::daemon
