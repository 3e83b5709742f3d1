// ShellJobs: attaching a shell job's (or run -i's) process, and its exit
// as its client reports it. See shell_jobs.h.

#include "daemon/shell/shell_jobs.h"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "daemon/base/log.h"
#include "daemon/launch/peer_process.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Status;

namespace {

// The parent pid of `pid` (/proc/<pid>/status PPid), or -1.
int64_t ParentOf(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("PPid:", 0) == 0) return std::atoll(line.c_str() + 5);
  }
  return -1;
}

}  // namespace

Status ShellJobs::Attach(const Caller& caller, uint64_t id, int64_t pid) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (job.mode != core::JobMode::kShell) {
    return core::FailedPreconditionError(
        "only shell jobs and run -i commands are attached by the client");
  }
  if (job.state != JobState::kRunning || job.pid != 0) {
    return core::FailedPreconditionError("job " + std::to_string(id) +
                                         " is not waiting for its client to start it");
  }
  // The pid must be the caller's own process and (unless an admin calls) a
  // child of the calling process itself: the client's held command, never
  // any other process (moved into the job's cgroup, `cancel` would end it).
  // A pidfd names the process checked: if it ended and its pid were reused
  // (by someone else's process) before the cgroup write, the probe after
  // the write fails.
  struct stat st;
  std::string proc = "/proc/" + std::to_string(pid);
  if (pid <= 0 || stat(proc.c_str(), &st) != 0) {
    return core::InvalidArgumentError("no process " + std::to_string(pid));
  }
  const int pidfd = int(syscall(SYS_pidfd_open, pid_t(pid), 0));
  if (pidfd < 0) return core::InvalidArgumentError("no process " + std::to_string(pid));
  struct PidFd {
    int fd;
    ~PidFd() { close(fd); }
  } holder{pidfd};
  if (stat(proc.c_str(), &st) != 0 || (st.st_uid != caller.uid && !caller.admin)) {
    return core::PermissionDeniedError("process " + std::to_string(pid) + " is not yours");
  }
  if (!caller.admin) {
    // The calling process as pinned at accept: its parent link read, then
    // proved by its pidfd to be still running, so that the pid compared
    // was the caller's and no newcomer's.
    if (!caller.process || ParentOf(pid) != caller.process->pid()) {
      return core::PermissionDeniedError("process " + std::to_string(pid) +
                                         " is not a child of the calling process");
    }
    GPUSLICE_RETURN_IF_ERROR(caller.process->CheckRunning());
  }
  // Into the job's cgroup before it runs anything (the client holds it until
  // this answers): a `setsid` child cannot leave the job, cancel ends all of
  // it, and --cpus/--host-mem apply. Refused, the client does not start it.
  GPUSLICE_RETURN_IF_ERROR(launcher_.AttachProcess(
      id, pid, {job.request.host_cpu_milli, job.request.host_memory_bytes}));
  if (syscall(SYS_pidfd_send_signal, pidfd, 0, nullptr, 0) != 0) {
    LogWarn("job " + std::to_string(id) + ": process " + std::to_string(pid) +
            " ended while it was being attached; its pid may name another process now");
    return core::FailedPreconditionError("process " + std::to_string(pid) +
                                         " ended while it was being attached");
  }
  table_.live()[id].in_cgroup = launcher_.UsesCgroups();
  job.pid = pid;
  job.pid_start_time = ProcessStartTime(pid);
  transitions_.Persist(job, JobState::kRunning);
  return Status::Ok();
}

Status ShellJobs::ReportExit(const Caller& caller, uint64_t id, int exit_code) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, it->second));
  if (it->second.mode != core::JobMode::kShell) {
    return core::FailedPreconditionError(
        "only shell jobs and run -i commands report their own exit");
  }
  auto l = table_.live().find(id);
  if (l == table_.live().end()) return Status::Ok();  // Already ended.
  l->second.reported_exit = exit_code;
  hooks_.watch_running();
  transitions_.Schedule();
  return Status::Ok();
}

bool ShellJobs::AwaitExitReport(LiveState& l, int64_t now) const {
  // The client waits for its shell (or run -i command) and then reports the
  // exit status, so the daemon often sees the processes gone first. Waiting
  // a little for that report keeps the status; a client that died with its
  // shell never reports, and the job ends without one after the grace.
  if (l.reported_exit || l.ending) return false;
  if (l.group_gone_ms == 0) l.group_gone_ms = now;
  return now - l.group_gone_ms < kExitReportGraceMs;
}

}  // namespace gpuslice::daemon
