#pragma once

// Starting and watching job processes, behind a seam (FakeLauncher in
// launcher_fake.h for tests).
//
// How a job runs (RealLauncher): the daemon forks a small supervisor, which
// leaves the daemon's session (setsid) and forks the job's leader. The leader
// makes its own process group, drops to the caller's uid/gid/groups (when the
// daemon is root), enters the caller's directory, points stdout/stderr at the
// job's log files and execs the command with the caller's environment. The
// supervisor waits for the leader and writes its wait status to the job's
// status file, then exits. Because the supervisor is not the daemon, the exit
// status survives a daemon crash: a restarted daemon re-adopts the job by its
// process group and still learns how it ended.
//
// A job is over when no process of its group is left (kill(-pgid, 0) fails
// with ESRCH): children that outlive the leader keep the allocation, as they
// may still hold GPU memory. The daemon is a child subreaper, so orphans of a
// job are reaped by it. A process that leaves the group (setsid) escapes this
// tracking; cgroups would close that gap and are not used yet.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace gpuslice::daemon {

struct LaunchSpec {
  std::vector<std::string> argv;
  std::string cwd;
  std::vector<std::string> env;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string stdout_path;
  std::string stderr_path;
  std::string status_path;  // Where the supervisor writes the wait status.
};

struct ProcessRef {
  int64_t pid = 0;              // The leader; also the process group id.
  uint64_t start_time = 0;      // /proc/PID/stat field 22; 0 if it ended already.
  int64_t supervisor_pid = 0;
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  // Starts the job. Errors (with errno text) when the command cannot be
  // started: not found, not executable, bad directory, cannot switch user.
  // The error's message says which.
  virtual core::Result<ProcessRef> Launch(const LaunchSpec& spec) = 0;
  // Whether any process of group `pgid` is left.
  virtual bool GroupAlive(int64_t pgid) = 0;
  // Whether process `pid` lives and (when start_time != 0) is the same one.
  virtual bool ProcessAlive(int64_t pid, uint64_t start_time) = 0;
  virtual core::Status SignalGroup(int64_t pgid, int signal) = 0;
  // Reaps exited children (supervisors, adopted orphans); returns their pids.
  virtual std::vector<int64_t> Reap() = 0;
};

class RealLauncher : public Launcher {
 public:
  RealLauncher();  // Makes the daemon a child subreaper.
  core::Result<ProcessRef> Launch(const LaunchSpec& spec) override;
  bool GroupAlive(int64_t pgid) override;
  bool ProcessAlive(int64_t pid, uint64_t start_time) override;
  core::Status SignalGroup(int64_t pgid, int signal) override;
  std::vector<int64_t> Reap() override;
};

// The exit code a shell would report for a wait status: the exit status, or
// 128 + the signal number for a process killed by a signal.
int ExitCodeOfWaitStatus(int wait_status);
// Reads the status file a supervisor wrote ("exit N" / "signal N"), as an
// exit code (see above); nullopt when absent or unreadable.
std::optional<int> ReadExitStatusFile(const std::string& path);
// Start time of `pid` (clock ticks since boot), or 0 when it does not exist.
uint64_t ProcessStartTime(int64_t pid);
// Finds `program` like execvp would, but in `path_env` (the job's PATH, not
// the daemon's). Names with a '/' are taken as they are.
core::Result<std::string> ResolveProgram(const std::string& program, const std::string& path_env,
                                         const std::string& cwd);
// errno as a Status, in one place.
core::Status ErrnoError(int err, const std::string& what);

}  // namespace gpuslice::daemon
