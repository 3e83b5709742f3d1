// JobEdits: changes to a job's request by its owner or an admin. A running
// job's memory and compute share are resized instead (service_policy.cc).
// See job_edits.h.

#include "daemon/edits/job_edits.h"

#include <utility>
#include <vector>

#include "core/strings.h"
#include "core/units.h"
#include "daemon/requests/job_text.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Result;
using core::Status;

namespace {

// The request of a queued job with `spec`'s changes, checked as a new
// request is (core::BuildRequest): the same words and bounds.
Result<core::ResourceRequest> UpdatedRequest(const Job& job, const UpdateSpec& spec) {
  core::ResourceRequest r = job.request;
  if ((spec.mem || spec.compute) && r.kind != core::RequestKind::kFraction) {
    return core::FailedPreconditionError(
        "job " + std::to_string(job.id) + " asks for " + r.Describe() +
        "; --mem and --compute change a part of one GPU (a --mem job): cancel it and submit "
        "the new request instead");
  }
  GPUSLICE_RETURN_IF_ERROR(core::ApplySliceSize(spec.mem, spec.compute, &r));
  if (spec.priority) {
    auto p = core::ParsePriority(*spec.priority);
    if (!p.ok()) return p.status().WithContext("--priority");
    r.priority = *p;
  }
  GPUSLICE_RETURN_IF_ERROR(r.Validate());
  return r;
}

}  // namespace

JobEdits::JobEdits(JobTable& table, JobTransitions& transitions, JobHolds& holds,
                   JobDependencies& dependencies, Jobs jobs)
    : table_(table),
      transitions_(transitions),
      holds_(holds),
      dependencies_(dependencies),
      jobs_(std::move(jobs)) {}

Result<JobView> JobEdits::Hold(const Caller& caller, uint64_t id) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (Health h = jobs_.health(); !h.ledger) {
    return core::UnavailableError("daemon degraded (" + h.reason + "): cannot record a hold");
  }
  if (job.state != JobState::kQueued) {
    return core::FailedPreconditionError(
        "job " + std::to_string(id) + " is " + std::string(core::JobStateName(job.state)) +
        "; only a queued job can be held (gpuslice suspend frees a running job's GPUs)");
  }
  // An admin's hold on someone else's job is the admin's to lift.
  const core::HoldKind kind = caller.admin && !(caller.local && caller.uid == job.uid)
                                  ? core::HoldKind::kAdmin
                                  : core::HoldKind::kUser;
  if (job.hold == core::HoldKind::kAdmin || job.hold == kind) return jobs_.view(job);
  const core::HoldKind before = job.hold;
  job.hold = kind;
  if (!transitions_.Persist(job, JobState::kQueued)) {
    job.hold = before;
    // The reason is the failed write's.
    return core::UnavailableError("daemon degraded (" + jobs_.health().reason +
                                  "): hold not recorded");
  }
  holds_.Hold(id);
  transitions_.RecordEvent(
      "held", id, job.user,
      "held by " + CallerName(caller) +
          (kind == core::HoldKind::kAdmin ? " (an admin's hold: only an admin releases it)" : ""));
  transitions_.Schedule();
  return jobs_.view(job);
}

Result<JobView> JobEdits::Release(const Caller& caller, uint64_t id) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (Health h = jobs_.health(); !h.ledger) {
    return core::UnavailableError("daemon degraded (" + h.reason + "): cannot record a release");
  }
  if (job.state != JobState::kQueued || job.hold == core::HoldKind::kNone) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " is not held (" +
                                         std::string(core::JobStateName(job.state)) + ")");
  }
  if (job.hold == core::HoldKind::kAdmin && !caller.admin) {
    return core::PermissionDeniedError("job " + std::to_string(id) +
                                       " was held by an admin; only root or the admin group may "
                                       "release it");
  }
  const core::HoldKind before = job.hold;
  job.hold = core::HoldKind::kNone;
  if (!transitions_.Persist(job, JobState::kQueued)) {
    job.hold = before;
    return core::UnavailableError("daemon degraded (" + jobs_.health().reason +
                                  "): release not recorded");
  }
  holds_.Release(id);
  transitions_.RecordEvent("released", id, job.user, "released by " + CallerName(caller));
  transitions_.Schedule();
  return jobs_.view(job);
}

Result<JobView> JobEdits::Update(const Caller& caller, uint64_t id, const UpdateSpec& spec) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (Health h = jobs_.health(); h.degraded) {
    return core::UnavailableError("daemon degraded (" + h.reason + "): not updating");
  }
  if (job.state != JobState::kQueued) {
    return core::FailedPreconditionError(
        "job " + std::to_string(id) + " is " + std::string(core::JobStateName(job.state)) +
        "; update changes queued jobs (gpuslice resize changes a running one)");
  }
  if (!spec.mem && !spec.compute && !spec.priority && !spec.after) {
    return core::InvalidArgumentError("update needs --mem, --compute, --priority or --after");
  }
  GPUSLICE_ASSIGN_OR_RETURN(core::ResourceRequest next, UpdatedRequest(job, spec));
  std::vector<core::Dependency> after = job.after;
  std::vector<uint64_t> pending;
  if (spec.after) {
    after.clear();
    if (!spec.after->empty()) {
      GPUSLICE_ASSIGN_OR_RETURN(after, core::ParseDependencies(*spec.after));
    }
    // Only on jobs submitted before it, as at submission: no job can then
    // wait for itself through a chain, and a restart recovers them in order.
    for (const core::Dependency& d : after) {
      if (d.job_id >= id) {
        return core::InvalidArgumentError("--after " + core::FormatDependency(d) + ": job " +
                                          std::to_string(id) +
                                          " may only wait for jobs submitted before it");
      }
    }
    GPUSLICE_ASSIGN_OR_RETURN(pending, dependencies_.Check(after));
  }
  // The new request against the machine, the admin's limits and the
  // quotas, as a submission is; nothing changes if any refuses it.
  Job candidate = job;
  candidate.request = next;
  candidate.after = after;
  GPUSLICE_RETURN_IF_ERROR(jobs_.could_ever_fit(next).WithContext("update"));
  GPUSLICE_RETURN_IF_ERROR(jobs_.check_quota(candidate));
  GPUSLICE_RETURN_IF_ERROR(jobs_.set_demand(id, next));
  std::vector<std::string> changes;
  if (next.Describe() != job.request.Describe()) {
    changes.push_back(job.request.Describe() + " -> " + next.Describe());
  }
  if (next.priority != job.request.priority) {
    changes.push_back("priority " + std::string(core::PriorityName(job.request.priority)) + " -> " +
                      std::string(core::PriorityName(next.priority)));
  }
  if (spec.after) {
    changes.push_back("after " +
                      (after.empty() ? std::string("none") : core::FormatDependencies(after)));
  }
  table_.Dequeue(id);  // Its place follows its (new) priority; its arrival stays.
  job.request = std::move(next);
  job.after = std::move(after);
  jobs_.enqueue(job);
  if (spec.after) {
    dependencies_.WaitFor(id, pending);
  }
  transitions_.Persist(job, JobState::kQueued);
  transitions_.RecordEvent(
      "updated", id, job.user,
      (changes.empty() ? std::string("no change") : core::Join(changes, ", ")) + " by " +
          CallerName(caller));
  transitions_.Schedule();
  return jobs_.view(job);
}

Result<JobView> JobEdits::SetLabels(const Caller& caller, uint64_t id,
                                    std::map<std::string, std::string> labels) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  GPUSLICE_RETURN_IF_ERROR(core::ValidateLabels(labels));
  if (!job.IsLive()) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " has already ended (" +
                                         std::string(core::JobStateName(job.state)) + ")");
  }
  if (job.labels == labels) return jobs_.view(job);
  job.labels = std::move(labels);
  transitions_.Persist(job, job.state);
  transitions_.RecordEvent("labelled", id, job.user,
                           job.labels.empty() ? "no labels" : LabelsText(job.labels));
  return jobs_.view(job);
}

Status JobEdits::ChangePriority(const Caller& caller, Job& job, core::Priority priority) {
  if (job.request.priority == priority) return Status::Ok();
  const core::Priority before = job.request.priority;
  job.request.priority = priority;
  // The slice's turns follow the new priority at once (the limits page and
  // the arbiter's board); preemption and the queue read it from the job.
  if (Status s = jobs_.update_slice(job); !s.ok()) {
    job.request.priority = before;
    return s.WithContext("update the slice");
  }
  transitions_.Persist(job, JobState::kRunning);
  transitions_.RecordEvent("resized", job.id, job.user,
                           "priority " + std::string(core::PriorityName(before)) + " -> " +
                               std::string(core::PriorityName(priority)) + " by " +
                               CallerName(caller));
  return Status::Ok();
}

}  // namespace gpuslice::daemon
