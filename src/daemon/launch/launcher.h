#pragma once

// Starting and watching job processes, behind a seam (FakeLauncher in
// launcher_fake.h for tests).
//
// How a job runs (RealLauncher): the daemon forks a small supervisor, which
// leaves the daemon's session (setsid) and forks the job's leader. The leader
// joins the job's cgroup (docs/DAEMON.md, cgroup.h), makes its own process
// group, drops to the caller's uid/gid/groups (when the daemon is root),
// enters the caller's directory, points stdout/stderr at pipes to the
// supervisor and execs the command with the caller's environment. The
// supervisor copies the pipes into the job's log files (capped: job_log.h),
// and once the leader has ended and its output is drained (every writer
// closed the pipes, or no process of the job is left) writes the leader's
// wait status to the job's status file. Because the supervisor is not the
// daemon, the exit status survives a daemon crash: a restarted daemon
// re-adopts the job (Adopt) and still learns how it ended.
//
// Jobs are known to the daemon by their leader's pid (also the process group
// id); the launcher maps it to the job's cgroup. A job is over when its
// cgroup is empty: setsid children, double forks and daemonised children stay
// in it, and keep the allocation, as they may still hold GPU memory. Without
// cgroups (not root, read-only cgroup fs, config cgroups = off) the launcher
// falls back to the process group (kill(-pgid, 0)), which a process that
// calls setsid escapes; Tracking() says which is in use. The daemon is a
// child subreaper, so orphans of a job are reaped by it.

#include <signal.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "daemon/launch/cgroup.h"

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
  uint64_t job_id = 0;      // Names the job's cgroup ("job-<id>"); 0 = none.
  HostLimits host_limits;   // --cpus, --host-mem: applied through the cgroup.
  // A container job's leader is the engine's client (`podman run ...`),
  // which must run as root (the daemon's rootful engine); the working
  // directory is still entered with the job's uid and groups, so a
  // container never gets a directory its owner could not reach.
  bool engine_as_root = false;
};

struct ProcessRef {
  int64_t pid = 0;          // The leader; also the process group id.
  uint64_t start_time = 0;  // /proc/PID/stat field 22; 0 if it ended already.
  int64_t supervisor_pid = 0;
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  // Starts the job. Errors (with errno text) when the command cannot be
  // started: not found, not executable, bad directory, cannot switch user,
  // a host limit that cannot be applied. The error's message says which.
  virtual core::Result<ProcessRef> Launch(const LaunchSpec& spec) = 0;
  // Whether any process of the job led by `pgid` is left: its cgroup is
  // populated, or (no cgroup) a process of group `pgid` lives.
  virtual bool GroupAlive(int64_t pgid) = 0;
  // Whether process `pid` lives and (when start_time != 0) is the same one.
  virtual bool ProcessAlive(int64_t pid, uint64_t start_time) = 0;
  // Sends `signal` to every process of the job (its cgroup, else its group).
  // SIGKILL ends the whole cgroup, including processes forked meanwhile.
  virtual core::Status SignalGroup(int64_t pgid, int signal) = 0;
  // Reaps exited children (supervisors, adopted orphans); returns their pids.
  virtual std::vector<int64_t> Reap() = 0;

  // Stops (true) or continues (false) every process of the job: the cgroup
  // freezer when it has one (a stopped job cannot notice or undo it), else
  // SIGSTOP / SIGCONT to its process group.
  virtual core::Status StopGroup(int64_t pgid, bool stop) {
    return SignalGroup(pgid, stop ? SIGSTOP : SIGCONT);
  }
  // After a daemon restart: job `job_id`, led by `pgid`, is running in the
  // ledger; find its cgroup again. Returns whether it has one.
  virtual bool Adopt(uint64_t job_id, int64_t pgid) {
    (void)job_id;
    (void)pgid;
    return false;
  }
  // A process the client started itself (a shell job, `run -i`), held
  // before it runs anything: put it in job `job_id`'s cgroup (created with
  // `limits`), so that whatever it forks, setsid or not, stays in the job,
  // and track the job by it from then on (`pid` is then its pgid here).
  // Without cgroups: nothing to do, unless host limits were asked for.
  virtual core::Status AttachProcess(uint64_t job_id, int64_t pid, const HostLimits& limits) {
    (void)job_id;
    (void)pid;
    if (limits.any()) {
      return core::FailedPreconditionError(
          "--cpus and --host-mem need cgroups, which this "
          "daemon does not use");
    }
    return core::Status::Ok();
  }
  // After re-adoption: kills and removes the cgroups of jobs not in
  // `adopted` (a job started by a daemon that died before recording it, or
  // one that the ledger no longer considers running). Returns their names.
  virtual std::vector<std::string> EndStrays(const std::vector<uint64_t>& adopted) {
    (void)adopted;
    return {};
  }
  // Why the job led by `pgid` ended, when the launcher can tell more than
  // its exit status (the kernel's OOM killer for --host-mem); "" otherwise.
  // Call before Release.
  virtual std::string EndNote(int64_t pgid) {
    (void)pgid;
    return {};
  }
  // The job led by `pgid` is over: remove its cgroup, forget it.
  virtual void Release(int64_t pgid) { (void)pgid; }
  // Every process of the job led by `pgid` as the kernel sees it (its
  // cgroup's members, setsid escapees included); nullopt when the job has no
  // cgroup (the caller then falls back to the process group).
  virtual std::optional<std::vector<int64_t>> GroupPids(int64_t pgid) {
    (void)pgid;
    return std::nullopt;
  }
  // How jobs are tracked, for doctor and status: "cgroup hybrid (...)" or
  // "process groups: ...".
  virtual std::string Tracking() const { return "process groups"; }
  // Whether jobs are tracked by cgroup.
  virtual bool UsesCgroups() const { return false; }
  // Starts a short helper command as the daemon (a container engine's `rm`
  // after a container job), not waiting for it: Reap() collects it. Its
  // output goes to the daemon's log (stderr).
  // Tried up to `attempts` times, a second apart, until it exits 0.
  virtual void RunHelper(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         int attempts = 1) {
    (void)argv;
    (void)env;
    (void)attempts;
  }
  // Job `job_id`'s cgroup for a container engine's --cgroup-parent
  // ("/gpuslice/job-12"); "" without cgroups.
  virtual std::string CgroupParent(uint64_t job_id) const {
    (void)job_id;
    return "";
  }
};

struct LauncherOptions {
  Cgroups* cgroups = nullptr;  // nullptr or unavailable: process groups.
  uint64_t max_log_bytes = 0;  // Per log file; 0 = no cap.
};

class RealLauncher : public Launcher {
 public:
  RealLauncher();  // Makes the daemon a child subreaper; no cgroups, no cap.
  explicit RealLauncher(LauncherOptions options);
  core::Result<ProcessRef> Launch(const LaunchSpec& spec) override;
  bool GroupAlive(int64_t pgid) override;
  bool ProcessAlive(int64_t pid, uint64_t start_time) override;
  core::Status SignalGroup(int64_t pgid, int signal) override;
  std::vector<int64_t> Reap() override;
  core::Status StopGroup(int64_t pgid, bool stop) override;
  bool Adopt(uint64_t job_id, int64_t pgid) override;
  core::Status AttachProcess(uint64_t job_id, int64_t pid, const HostLimits& limits) override;
  std::vector<std::string> EndStrays(const std::vector<uint64_t>& adopted) override;
  std::string EndNote(int64_t pgid) override;
  void Release(int64_t pgid) override;
  std::optional<std::vector<int64_t>> GroupPids(int64_t pgid) override;
  std::string Tracking() const override;
  bool UsesCgroups() const override { return cgroups_ != nullptr; }
  void RunHelper(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                 int attempts = 1) override;
  std::string CgroupParent(uint64_t job_id) const override {
    return cgroups_ != nullptr ? cgroups_->PathFromRoot("job-" + std::to_string(job_id)) : "";
  }

 private:
  struct Tracked {
    std::string cgroup;  // "job-<id>"
    HostLimits limits;
  };
  // The job's cgroup name when it has one.
  const Tracked* Find(int64_t pgid) const;

  Cgroups* cgroups_ = nullptr;  // Only when available.
  std::string cgroup_problem_;  // Why not, when not.
  uint64_t max_log_bytes_ = 0;
  std::map<int64_t, Tracked> tracked_;  // Leader pid -> its job's cgroup.
};

// The exit code a shell would report for a wait status: the exit status, or
// 128 + the signal number for a process killed by a signal.
int ExitCodeOfWaitStatus(int wait_status);
// Reads the status file a supervisor wrote ("exit N" / "signal N"), as an
// exit code (see above); nullopt when absent or unreadable.
std::optional<int> ReadExitStatusFile(const std::string& path);
// Start time of `pid` (clock ticks since boot), or 0 when it does not exist.
uint64_t ProcessStartTime(int64_t pid);
// Whether `pid` has ended and waits to be reaped (state Z or X in
// /proc/PID/stat). A process that is not our child may stay a zombie for a
// while (a container's init that reaps late): for whoever watches it, it is
// gone. False when there is no such process.
bool ProcessIsZombie(int64_t pid);
// Finds `program` like execvp would, but in `path_env` (the job's PATH, not
// the daemon's). Names with a '/' are taken as they are.
core::Result<std::string> ResolveProgram(const std::string& program, const std::string& path_env,
                                         const std::string& cwd);
// errno as a Status, in one place.
core::Status ErrnoError(int err, const std::string& what);

}  // namespace gpuslice::daemon
