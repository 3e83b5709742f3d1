// Service: what the API and the queue ask of suspension, resume and moves
// (docs/SUSPEND.md). The checkpoint workers, what they leave and how a
// finished one changes its job are the Suspender's (suspend/suspender.h);
// here are the permission checks of `gpuslice suspend`, resumes the daemon
// starts by itself (a preemption victim once it fits again), and resume on
// demand: a suspended job whose processes asked waits in the queue.

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

std::string Seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

}  // namespace

Status Service::Suspend(const Caller& caller, uint64_t id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (job.state == JobState::kSuspended) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " is suspended already");
  }
  auto l = live_.find(id);
  if (job.state != JobState::kRunning || l == live_.end()) {
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
  } else if (cause.preempted_for != 0 && jobs_.count(cause.preempted_for)) {
    preemptions_.EndForPreemption(job, cause.preempted_for);
  } else if (requeue) {
    preemptions_.RequeueForReclaim(job, cause.reclaimed_for);
  }
  // Not planned again for a while: it would fail the same way.
  if (cause.defrag_for != 0) defrag_.MoveFailed(id, clock_.NowMs());
}

void Service::ResumeWhenRoom() {
  if (!capacity_ || degraded()) return;
  std::vector<uint64_t> ids;
  for (const auto& [id, l] : live_) {
    const Job& job = jobs_[id];
    if (job.state == JobState::kSuspended && job.resume_when_fits && !suspender_.Busy(id) &&
        !l.ending) {
      ids.push_back(id);
    }
  }
  if (ids.empty()) return;
  // Higher priority first, then the longest suspended.
  std::sort(ids.begin(), ids.end(), [&](uint64_t a, uint64_t b) {
    const Job &x = jobs_[a], &y = jobs_[b];
    if (x.request.priority != y.request.priority) return x.request.priority > y.request.priority;
    return x.suspended_since_ms < y.suspended_since_ms;
  });
  for (uint64_t id : ids) {
    Job& job = jobs_[id];
    // A queued job of higher priority would preempt it again at once.
    bool outranked = std::any_of(queue_.begin(), queue_.end(), [&](const core::QueuedJob& q) {
      return q.priority > job.request.priority;
    });
    if (outranked) continue;
    // A job that would borrow over its group's quota again takes only idle
    // capacity, as when it started: not while a job waits first in line.
    if (plan_head_ != 0 && !queue_.empty() && options_.rules.quota_borrowing && !quotas_.empty()) {
      if (quotas_.WouldBorrow(job, clock_.NowMs())) continue;
    }
    // Quiet when there is no room yet: it is tried again every tick.
    if (Status s = suspender_.Resume(job, "the daemon (room again)"); !s.ok()) continue;
  }
}

void Service::WatchResumeRequests() {
  if (!options_.rules.resume_on_demand || !capacity_ || degraded()) return;
  std::vector<uint64_t> asked;
  for (const auto& [id, l] : live_) {
    const Job& job = jobs_[id];
    if (job.state != JobState::kSuspended || suspender_.Busy(id) || l.ending ||
        suspender_.ResumeAskedMs(id) != 0) {
      continue;
    }
    const uint64_t suspension = Suspender::SuspensionId(job);
    if (suspender_.ResumeRefused(id) == suspension) continue;
    // The job's own report, which only its processes can write: it decides
    // nothing but "this job, this suspension, wants its GPU back". Any other
    // value (a stale request, a job's scribbles) is ignored.
    core::Result<uint64_t> request = regions_.ResumeRequest(job.region_path);
    if (request.ok() && *request == suspension) asked.push_back(id);
  }
  for (uint64_t id : asked) AskResume(jobs_[id]);
  if (!asked.empty()) RequestSchedule();
}

void Service::AskResume(Job& job) {
  // Back where it was if that has room, else where the driver can move it
  // (a GPU of its model and pool), as a resume by hand.
  std::vector<std::string> elsewhere;
  if (suspender_.CanMove(job).ok()) elsewhere = suspender_.MoveCandidates(job);
  capacity_->SetResumeTarget(job.id, job.allocation, std::move(elsewhere));
  core::QueuedJob q;
  q.id = job.id;
  q.priority = job.request.priority;
  // It arrives now, behind every job submitted so far: it takes the newest
  // one's sequence number and goes in after it (upper_bound), so that asking
  // never jumps the queue, whatever the job's id.
  q.seq = next_id_ > 1 ? next_id_ - 1 : 0;
  q.shape = capacity_->ShapeOf(job.id);
  // Pinned to its own GPUs first: its failure to fit says nothing about
  // another job's shape, nor theirs about it.
  q.shape.constraint = (uint64_t{1} << 63) | job.id;
  // Ranked like a job submitted now (fair share, no age yet), so that it
  // neither jumps ahead of nor falls behind jobs already ranked.
  const int64_t asked_ms = clock_.NowMs();
  suspender_.SetResumeAskedMs(job.id, asked_ms);
  q.rank = ranker_.RankOf(job, asked_ms);
  queue_.insert(std::upper_bound(queue_.begin(), queue_.end(), q, core::QueueBefore), q);
  ++queued_by_uid_[job.uid];
  RecordEvent("resume_asked", job.id, job.user,
              "a CUDA call of one of its processes asked to resume it; it waits in the queue "
              "for room on " +
                  core::Join(job.allocation.gpu_uuids, ", ") +
                  (suspender_.CanMove(job).ok() ? " or another GPU of its model" : ""));
}

void Service::ResumeOnDemand(uint64_t id) {
  Job& job = jobs_[id];
  Live& l = live_[id];
  capacity_->ForgetResumeTarget(id);
  if (l.ending) {
    // Cancelled while it waited: its room goes back, it is not resumed.
    capacity_->Release(id);
    suspender_.SetResumeAskedMs(id, 0);
    return;
  }
  const std::string by = "its own CUDA call (on demand, after " +
                         Seconds(clock_.NowMs() - suspender_.ResumeAskedMs(id)) + " in the queue)";
  if (Status s = suspender_.Resume(job, by, {}, /*placed=*/true, /*on_demand=*/true); !s.ok()) {
    // Its room went back (Suspender::Resume); the request is not honoured
    // again for this suspension.
    suspender_.SetResumeAskedMs(id, 0);
    suspender_.RefuseResume(id, Suspender::SuspensionId(job));
    suspender_.SetError(id, "resume failed: " + s.message());
    RecordEvent(
        "resume_failed", id, job.user,
        suspender_.Error(id) + " (asked by " + by + "); it stays suspended until resumed by hand");
    return;
  }
}

void Service::DropResumeDemand(uint64_t id) {
  if (suspender_.ResumeAskedMs(id) == 0) return;
  Dequeue(id);
  if (capacity_) capacity_->ForgetResumeTarget(id);
  suspender_.SetResumeAskedMs(id, 0);
  waiting_index_stale_ = true;
}

}  // namespace gpuslice::daemon
