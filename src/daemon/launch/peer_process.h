#pragma once

// The process at the other end of a unix-socket connection, fixed when the
// daemon accepts the connection. SO_PEERCRED's pid names a process
// only at that moment: a connection can outlive the process that opened it
// (passed to a child, or held open while its owner waits), and once that
// process ends its pid is free for any process, root's included. So nothing
// the daemon decides from a caller's pid looks the pid up later. At accept it
// takes a pidfd of the caller (SO_PEERPIDFD where the kernel has it, Linux
// 6.5; else pidfd_open(2) of SO_PEERCRED's pid, whose effective ids must then
// be SO_PEERCRED's) and reads what /proc says of it (real uid, start time)
// while the pidfd proves the pid still names that very process. Later it
// asks the pidfd whether that process is still running: while it is, its pid
// names it and nobody else.
//
// Users: HttpServer (pins every unix-socket caller; a request on a
// connection whose process has ended is refused), Service (slurm_only's
// "real uid root", a bound external job's holder, the parent check of
// `attach`).

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace gpuslice::daemon {

// What /proc said of the caller's process when its connection was accepted.
struct PeerIdentity {
  int32_t pid = 0;
  // Real uid: who started the process. slurmstepd's is root while its
  // effective uid (SO_PEERCRED's) is the job's user.
  uint32_t real_uid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22 (clock ticks since boot).
};

class PeerProcess {
 public:
  virtual ~PeerProcess() = default;
  const PeerIdentity& identity() const { return identity_; }
  int32_t pid() const { return identity_.pid; }
  // Ok while the process that opened the connection has not ended, so that
  // its pid names it and no other. PermissionDenied, naming the pid, once
  // it has ended (a zombie too: its pid is about to be anyone's).
  virtual core::Status CheckRunning() const = 0;

 protected:
  explicit PeerProcess(PeerIdentity identity) : identity_(identity) {}

 private:
  PeerIdentity identity_;
};

// The peer of the connected unix socket `socket_fd`, pinned by a pidfd the
// returned object owns (closed with it). Errors: PermissionDenied when the
// process that connected has ended or is not the one SO_PEERCRED described
// (its pid already names another process); ResourceExhausted when the
// daemon is out of descriptors; NotFound when the peer's pid is not visible
// in the daemon's PID namespace (SO_PEERCRED gives 0), in which case the
// caller has no process the daemon could bind or judge.
core::Result<std::unique_ptr<PeerProcess>> PinPeerProcess(int socket_fd);

// pidfd_open(2) of `pid`, then its ids from /proc, which must show effective
// ids `euid` and `egid` (what SO_PEERCRED said of the process that
// connected): the path of kernels without SO_PEERPIDFD, public for tests.
core::Result<std::unique_ptr<PeerProcess>> PinProcessByPid(pid_t pid, uint32_t euid, uint32_t egid);

// For Service tests: a process whose end the test decides.
class FakePeerProcess : public PeerProcess {
 public:
  explicit FakePeerProcess(PeerIdentity identity) : PeerProcess(identity) {}
  core::Status CheckRunning() const override {
    if (!ended) return core::Status::Ok();
    return core::PermissionDeniedError("the process that opened this connection (pid " +
                                       std::to_string(pid()) + ") has ended");
  }
  bool ended = false;
};

}  // namespace gpuslice::daemon
