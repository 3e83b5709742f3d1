// Service: changing a job while it waits (docs/DAEMON.md, "Changing queued
// jobs"): hold and release (Slurm's `scontrol hold/release`), and update
// (its `scontrol update`) of the memory, compute share, priority and
// dependencies of a queued job. A running job is resized instead
// (service_policy.cc). See service.h.

#include <algorithm>

#include "core/strings.h"
#include "core/units.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Result;
using core::Status;

namespace {

std::string Who(const Caller& c) { return c.user.empty() ? std::to_string(c.uid) : c.user; }

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

Result<JobView> Service::Hold(const Caller& caller, uint64_t id) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (!ledger_) {
    return core::UnavailableError("daemon degraded (" + degraded_.reason() +
                                  "): cannot record a hold");
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
  if (job.hold == core::HoldKind::kAdmin || job.hold == kind) return View(job);
  const core::HoldKind before = job.hold;
  job.hold = kind;
  if (!Persist(job, JobState::kQueued)) {
    job.hold = before;
    return core::UnavailableError("daemon degraded (" + degraded_.reason() +
                                  "): hold not recorded");
  }
  holds_.Hold(id);
  RecordEvent(
      "held", id, job.user,
      "held by " + Who(caller) +
          (kind == core::HoldKind::kAdmin ? " (an admin's hold: only an admin releases it)" : ""));
  Schedule();
  return View(job);
}

Result<JobView> Service::Release(const Caller& caller, uint64_t id) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (!ledger_) {
    return core::UnavailableError("daemon degraded (" + degraded_.reason() +
                                  "): cannot record a release");
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
  if (!Persist(job, JobState::kQueued)) {
    job.hold = before;
    return core::UnavailableError("daemon degraded (" + degraded_.reason() +
                                  "): release not recorded");
  }
  holds_.Release(id);
  RecordEvent("released", id, job.user, "released by " + Who(caller));
  Schedule();
  return View(job);
}

Result<JobView> Service::Update(const Caller& caller, uint64_t id, const UpdateSpec& spec) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (degraded()) {
    return core::UnavailableError("daemon degraded (" + degraded_.reason() + "): not updating");
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
  GPUSLICE_RETURN_IF_ERROR(capacity_->CouldEverFit(next).WithContext("update"));
  GPUSLICE_RETURN_IF_ERROR(intake_.CheckQuotaAtSubmit(candidate));
  GPUSLICE_RETURN_IF_ERROR(capacity_->SetDemand(id, next));
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
  Enqueue(job);
  if (spec.after) {
    dependencies_.WaitFor(id, pending);
  }
  Persist(job, JobState::kQueued);
  RecordEvent("updated", id, job.user,
              (changes.empty() ? std::string("no change") : core::Join(changes, ", ")) + " by " +
                  Who(caller));
  Schedule();
  return View(job);
}

}  // namespace gpuslice::daemon
