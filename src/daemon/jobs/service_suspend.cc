// Service: a resume demand's place in the queue (docs/SUSPEND.md). The
// checkpoint workers, what they leave, how a finished one changes its job,
// and resumes the daemon starts by itself (on demand, once there is room)
// are the Suspender's (suspend/suspender.h); the checks of `gpuslice
// suspend`, `resume` and `move`, and what a failed suspension's cause does
// instead, are LiveChanges' (live/live_changes.h).

#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;

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
