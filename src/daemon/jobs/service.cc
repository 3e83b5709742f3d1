// Service: jobs as users ask for them. Cancel, attaching a shell or `run -i`
// command, reporting its exit (taking in a submission is intake/job_intake.h's;
// views, lists and logs are reads/job_reads.h's). Starting, recovery and the
// ledger are in service_state.cc; moving jobs along in service_lifecycle.cc.
// See service.h.

#include "daemon/jobs/service.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "core/strings.h"
#include "daemon/base/log.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Result;
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

void Service::Enqueue(const Job& job) {
  core::QueuedJob q;
  q.id = job.id;
  q.priority = job.request.priority;
  q.seq = job.id;
  q.max_runtime = job.request.max_runtime;
  q.estimate = ranker_.EstimateOf(job);
  q.shape = capacity_->ShapeOf(job.id);
  q.rank = ranker_.RankOfArrival(job);
  table_.Enqueue(q, job.uid);
}

Status Service::Cancel(const Caller& caller, uint64_t id, std::optional<int> exit_code) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (exit_code && job.mode != core::JobMode::kExternal) {
    return core::InvalidArgumentError(
        "exit_code: only the release of an external job (a Slurm step's slice) says how its "
        "work ended; job " +
        std::to_string(id) + " records its own");
  }
  if (degraded() && !ledger_) {
    return core::UnavailableError("daemon degraded (" + degraded_.reason() +
                                  "): cannot record a cancel");
  }
  std::string who =
      "cancelled by " + (caller.user.empty() ? std::to_string(caller.uid) : caller.user);
  if (job.state == JobState::kQueued) {
    FinishJob(job, JobState::kCancelled, -1, who);
    Schedule();
    return Status::Ok();
  }
  if (job.state != JobState::kRunning && job.state != JobState::kSuspended) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " has already ended (" +
                                         std::string(core::JobStateName(job.state)) + ")");
  }
  if (job.mode == core::JobMode::kExternal && !external_.HeldProcesses(job).empty()) {
    // A bound job whose processes still run (an admin cancels a Slurm step's
    // slice): they are ended as a launched job's are, then the slice goes.
    Live& l = table_.live()[id];
    if (!l.ending) {
      l.ending = JobState::kCancelled;
      l.ending_reason = who;
      l.kill_at_ms = clock_.NowMs() + options_.kill_grace_ms;
      external_.SignalHeld(job, SIGTERM);
    }
    return Status::Ok();
  }
  if (job.mode == core::JobMode::kExternal) {
    // Released: its slice goes now. Nothing was killed, so it exited, with
    // the status its owner reports (a Slurm step's, so a failed step does
    // not show exit 0), else 0.
    FinishJob(job, JobState::kExited, exit_code.value_or(0),
              "released by " + (caller.user.empty() ? std::to_string(caller.uid) : caller.user));
    Schedule();
    return Status::Ok();
  }
  Live& l = table_.live()[id];
  if (!l.ending) {
    l.ending = JobState::kCancelled;
    l.ending_reason = who;
    l.kill_at_ms = clock_.NowMs() + options_.kill_grace_ms;
    (void)launcher_.SignalGroup(job.pid, SIGTERM);
    if (job.mode == core::JobMode::kShell) (void)launcher_.SignalGroup(job.pid, SIGHUP);
  }
  return Status::Ok();
}

Status Service::Attach(const Caller& caller, uint64_t id, int64_t pid) {
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
  Persist(job, JobState::kRunning);
  return Status::Ok();
}

Status Service::ReportExit(const Caller& caller, uint64_t id, int exit_code) {
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
  WatchRunning();
  Schedule();
  return Status::Ok();
}

}  // namespace gpuslice::daemon
