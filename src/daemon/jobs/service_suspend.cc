// Service: what the API and the queue ask of suspension and resume
// (docs/SUSPEND.md). The checkpoint workers, what they leave, how a finished
// one changes its job, and resumes the daemon starts by itself (on demand,
// once there is room) are the Suspender's (suspend/suspender.h); here are
// the permission checks of `gpuslice suspend`, what a failed suspension's
// cause does instead, and a resume demand's place in the queue.

#include <algorithm>

#include "core/strings.h"
#include "daemon/base/log.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Status;

namespace {

std::string Who(const Caller& caller) {
  return caller.user.empty() ? "uid " + std::to_string(caller.uid) : caller.user;
}

}  // namespace

Status Service::Suspend(const Caller& caller, uint64_t id) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (job.state == JobState::kSuspended) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " is suspended already");
  }
  auto l = table_.live().find(id);
  if (job.state != JobState::kRunning || l == table_.live().end()) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " is " +
                                         std::string(core::JobStateName(job.state)) +
                                         ": only a running job can be suspended");
  }
  SuspendCause cause;
  cause.by = Who(caller);
  return suspender_.Suspend(job, cause);
}

void Service::AfterFailedSuspend(Job& job, const SuspendCause& cause) {
  const uint64_t id = job.id;
  const bool requeue = cause.reclaimed_for != 0 && job.restartable;
  if (cause.idle_fallback) {
    idle_.Act(job, *cause.idle_fallback, cause.idle_text);
  } else if (cause.preempted_for != 0 && table_.jobs().count(cause.preempted_for)) {
    preemptions_.EndForPreemption(job, cause.preempted_for);
  } else if (requeue) {
    preemptions_.RequeueForReclaim(job, cause.reclaimed_for);
  }
  // Not planned again for a while: it would fail the same way.
  if (cause.defrag_for != 0) defrag_.MoveFailed(id, clock_.NowMs());
}

void Service::QueueResumeDemand(const Job& job, int64_t asked_ms) {
  core::QueuedJob q;
  q.id = job.id;
  q.priority = job.request.priority;
  // It arrives now, behind every job submitted so far: it takes the newest
  // one's sequence number and goes in after it (upper_bound), so that asking
  // never jumps the queue, whatever the job's id.
  q.seq = table_.last_id();
  q.shape = capacity_->ShapeOf(job.id);
  // Pinned to its own GPUs first: its failure to fit says nothing about
  // another job's shape, nor theirs about it.
  q.shape.constraint = (uint64_t{1} << 63) | job.id;
  // Ranked like a job submitted now (fair share, no age yet), so that it
  // neither jumps ahead of nor falls behind jobs already ranked.
  q.rank = ranker_.RankOf(job, asked_ms);
  table_.Enqueue(q, job.uid);
}

}  // namespace gpuslice::daemon
