#include "daemon/makeroom/preemptions.h"

#include <algorithm>
#include <chrono>

#include "core/schedule/fair_share.h"
#include "core/schedule/preemption.h"
#include "core/strings.h"
#include "core/units.h"
#include "daemon/base/log.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Status;

void Preemptions::Preempt(uint64_t head_id) {
  const core::PreemptionPolicy& policy = rules_.preemption;
  if (policy.mode == core::PreemptionMode::kNever || head_id == 0) return;
  auto in_flight = preempting_.find(head_id);
  if (in_flight != preempting_.end()) return;  // Victims are still ending.
  preempt_note_.erase(head_id);
  const Job& head = jobs_.job(head_id);
  std::vector<core::PreemptCandidate> running;
  jobs_.for_each_live([&](const LiveJob& l) {
    if (l.ending) return;                          // Ending anyway.
    if (l.suspended() || l.checkpointing) return;  // Holds nothing, or is busy.
    const Job& job = *l.job;
    // An external job's processes are not the daemon's to end (a pod's
    // container, a Slurm step): its owner releases it, preemption never does.
    if (job.mode == core::JobMode::kExternal) return;
    core::PreemptCandidate c;
    c.id = job.id;
    c.priority = job.request.priority;
    c.started_ms = job.started_ms;
    c.restartable = job.restartable;
    const core::Allocation& a = job.allocation;
    switch (job.request.kind) {
      case core::RequestKind::kWholeGpus:
        c.gpu_weight = static_cast<double>(a.gpu_indices.size());
        break;
      case core::RequestKind::kFraction:
        c.gpu_weight = job.request.compute_milli ? job.request.compute_milli / 1000.0 : 0.1;
        break;
      case core::RequestKind::kMig:
        c.gpu_weight = job.request.mig.compute_slices / 7.0;
        break;
    }
    running.push_back(c);
  });
  if (running.empty()) return;
  auto plan = core::PlanPreemption(head_id, head.request.priority, running, policy, clock_.NowMs(),
                                   jobs_.capacity());
  if (!plan.ok()) {
    preempt_note_[head_id] = plan.status().message();
    return;
  }
  std::string victims;
  for (uint64_t v : plan->victims) victims += (victims.empty() ? "" : ", ") + std::to_string(v);
  size_t suspending = 0;
  for (uint64_t v : plan->victims) {
    const Job& job = jobs_.job(v);
    // Suspended rather than ended where the driver can checkpoint it: no work
    // is lost, and it comes back once it fits again. Ended as before when
    // the suspension cannot even start, or (Suspender::Finish) fails.
    if (rules_.preempt_by_suspend && checkpointer_) {
      SuspendToMakeRoom cause;
      cause.by = "preemption by job " + std::to_string(head_id) + " (" +
                 std::string(core::PriorityName(head.request.priority)) + " priority)";
      cause.preempted_for = head_id;
      Status s = jobs_.suspend(v, cause);
      if (s.ok()) {
        ++suspending;
        jobs_.record("preempted", v, job.user,
                     cause.by + ": suspending; resumed when it fits again");
        continue;
      }
      jobs_.record("suspend_failed", v, job.user, cause.by + ": " + s.message() + "; ending it");
    }
    EndForPreemption(job, head_id);
  }
  preempting_[head_id] = plan->victims;
  jobs_.record("preempting", head_id, head.user,
               std::string(suspending == plan->victims.size() ? "suspending"
                           : suspending > 0                   ? "suspending or ending"
                                                              : "ending") +
                   " lower-priority job(s) " + victims + " to make room (" +
                   std::to_string(static_cast<int64_t>(plan->lost_gpu_seconds)) +
                   " GPU-seconds of work lost at most)");
  LogInfo("job " + std::to_string(head_id) + " preempts job(s) " + victims);
}

void Preemptions::EndForPreemption(const Job& job, uint64_t head_id) {
  const Job& head = jobs_.job(head_id);
  const std::string reason = "preempted by job " + std::to_string(head_id) + " (" +
                             std::string(core::PriorityName(head.request.priority)) + " priority)";
  jobs_.end(job.id, job.restartable ? JobState::kQueued : JobState::kCancelled, reason,
            clock_.NowMs() + rules_.preemption_grace_ms, /*hang_up=*/true);
  jobs_.record("preempted", job.id, job.user,
               reason + (job.restartable ? "; requeued when it ends" : "; not restartable") +
                   "; SIGTERM, SIGKILL after " +
                   core::FormatDuration(std::chrono::milliseconds(rules_.preemption_grace_ms)));
}

void Preemptions::Forget() {
  // A head's preemption (or reclaim of borrowed capacity) is over once none
  // of its victims still runs (a suspended victim holds nothing; one being
  // suspended still does).
  for (auto* victims_of : {&preempting_, &reclaiming_}) {
    for (auto it = victims_of->begin(); it != victims_of->end();) {
      bool running = std::any_of(it->second.begin(), it->second.end(), [&](uint64_t v) {
        std::optional<LiveJob> l = jobs_.live(v);
        return l && (!l->suspended() || l->checkpointing);
      });
      it = running ? std::next(it) : victims_of->erase(it);
    }
  }
}

std::string Preemptions::WaitingText(uint64_t head_id) const {
  std::string text;
  if (auto p = preempting_.find(head_id); p != preempting_.end()) {
    std::string ids;
    for (uint64_t id : p->second) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    text += "; preempting job(s) " + ids;
  } else if (auto n = preempt_note_.find(head_id); n != preempt_note_.end()) {
    text += "; cannot preempt: " + n->second;
  }
  if (auto r = reclaiming_.find(head_id); r != reclaiming_.end()) {
    std::vector<std::string> ids;
    for (uint64_t id : r->second) ids.push_back(std::to_string(id));
    text += "; taking its group's quota back from job(s) " + core::Join(ids, ", ");
  }
  return text;
}

bool Preemptions::Borrowable(const Job& job) const {
  if (job.restartable) return true;
  // Suspendable: the daemon runs its processes (not a Slurm step's or a
  // pod's), outside a container, and the driver can checkpoint.
  return checkpointer_ && checkpointer_->Available().ok() && job.mode != core::JobMode::kExternal &&
         job.image.empty();
}

void Preemptions::Reclaim(uint64_t head_id) {
  if (!quotas_.borrowing() || head_id == 0) return;
  if (reclaiming_.count(head_id)) return;  // Its borrowers are still leaving.
  reclaim_note_.erase(head_id);
  const Job& head = jobs_.job(head_id);
  // Only a job within a group's guarantee reclaims: some group quota of its
  // owner applies (and, the head not being a borrower, has room for it).
  if (!quotas_.guaranteed(head)) return;
  std::vector<core::PreemptCandidate> candidates;
  for (uint64_t id : quotas_.borrowers()) {
    std::optional<LiveJob> l = jobs_.live(id);
    if (!l || l->ending || l->checkpointing || l->suspended()) continue;
    const Job& job = *l->job;
    if (job.mode == core::JobMode::kExternal) continue;
    core::PreemptCandidate c;
    c.id = id;
    c.priority = job.request.priority;
    c.started_ms = job.started_ms;
    c.restartable = job.restartable;
    c.gpu_weight = core::HeldGpuWeight(job.request, job.allocation, quotas_.whole_gpu_bytes());
    candidates.push_back(c);
  }
  if (candidates.empty()) return;
  auto plan = core::ChooseVictims(head_id, candidates, clock_.NowMs(), jobs_.capacity());
  if (!plan.ok()) {
    reclaim_note_[head_id] = plan.status().message();
    return;
  }
  std::vector<std::string> ids;
  for (uint64_t v : plan->victims) {
    const Job& job = jobs_.job(v);
    ids.push_back(std::to_string(v));
    const std::string by =
        "reclaim for job " + std::to_string(head_id) + " (within its group's quota)";
    if (checkpointer_ && job.image.empty()) {
      SuspendToMakeRoom cause;
      cause.by = by;
      cause.reclaimed_for = head_id;
      Status s = jobs_.suspend(v, cause);
      if (s.ok()) {
        jobs_.record("reclaimed", v, job.user,
                     "over its group's quota: " + by + ": suspending; resumed when there is room");
        continue;
      }
      jobs_.record("suspend_failed", v, job.user,
                   by + ": " + s.message() + (job.restartable ? "; requeued" : "; it runs on"));
    }
    if (job.restartable) RequeueForReclaim(job, head_id);
  }
  reclaiming_[head_id] = plan->victims;
  jobs_.record("reclaiming", head_id, head.user,
               "taking back its group's quota from borrowing job(s) " + core::Join(ids, ", "));
}

void Preemptions::RequeueForReclaim(const Job& job, uint64_t head_id) {
  const std::string reason = "over its group's quota: capacity reclaimed for job " +
                             std::to_string(head_id) + " (within its group's quota)";
  jobs_.end(job.id, JobState::kQueued, reason, clock_.NowMs() + rules_.preemption_grace_ms,
            /*hang_up=*/false);
  jobs_.record("reclaimed", job.id, job.user,
               reason + "; requeued: SIGTERM, SIGKILL after " +
                   core::FormatDuration(std::chrono::milliseconds(rules_.preemption_grace_ms)));
}

}  // namespace gpuslice::daemon
