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
  if (degraded_.degraded() && !ledger_) {
    return core::UnavailableError("daemon degraded (" + degraded_.reason() +
                                  "): cannot record a cancel");
  }
  std::string who = "cancelled by " + CallerName(caller);
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
    FinishJob(job, JobState::kExited, exit_code.value_or(0), "released by " + CallerName(caller));
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

}  // namespace gpuslice::daemon
