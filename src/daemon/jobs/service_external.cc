// Service: external jobs (mode external) — a slice held for processes that
// someone else starts: a Kubernetes container (the device plugin asks for it
// in Allocate), later a Slurm step. The daemon launches nothing; the job is
// placed at once or refused (a kubelet admitting a pod cannot wait in our
// queue), holds its slice (region, limits page, CDI device, a seat on the
// GPU's arbiter) like any job, and ends when its owner releases it (cancel)
// or at its maximum run time. Its own checks, a bound job's holder and its
// processes, and its end: the component ExternalJobs
// (external/external_jobs.h). docs/KUBERNETES.md, docs/SLURM.md,
// docs/API.md.

#include "core/strings.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Result;
using core::Status;

Result<JobView> Service::SubmitExternal(const Caller& caller, SubmitSpec spec) {
  if (!spec.argv.empty() || !spec.cwd.empty() || !spec.env.empty() || spec.image || spec.engine ||
      !spec.after.empty() || spec.restartable) {
    return core::InvalidArgumentError(
        "an external job runs nothing: argv, cwd, env, image, engine, after and restartable "
        "do not apply (its processes are started by whoever asked for it)");
  }
  GPUSLICE_ASSIGN_OR_RETURN(core::ResourceRequest request, external_.CheckRequest(spec.fields));
  const uint64_t id = table_.next_id();
  GPUSLICE_RETURN_IF_ERROR(capacity_->SetDemand(id, request));
  if (Status ever = capacity_->CouldEverFit(request); !ever.ok()) {
    capacity_->ForgetDemand(id);
    return core::InvalidArgumentError(ever.message());
  }
  Job job = NewJob(caller, id, std::move(request), core::JobMode::kExternal);
  job.labels = std::move(spec.labels);
  if (spec.bound_to_caller) {
    if (Status bound = external_.BindToCaller(caller.local, caller.process.get(), &job);
        !bound.ok()) {
      capacity_->ForgetDemand(id);
      return bound;
    }
  }
  if (Status q = CheckQuotaAtSubmit(job); !q.ok()) {
    capacity_->ForgetDemand(id);
    return q;
  }
  // Never queued, so a quota must have room now, beside what runs.
  if (!quotas_.empty()) {
    core::QuotaDecision d =
        quotas_.Decide(quotas_.OwnerOf(job), quotas_.RequestCharge(job), quotas_.RunningUsage(0));
    if (d.verdict != core::QuotaVerdict::kFits) {
      capacity_->ForgetDemand(id);
      return core::FailedPreconditionError("over quota now: " + d.reason);
    }
  }
  if (Status placed = capacity_->PlaceOn(id, spec.gpu_uuids); !placed.ok()) {
    capacity_->ForgetDemand(id);
    if (placed.code() != core::StatusCode::kFailedPrecondition) return placed;
    // Say who holds the GPUs, and the fence when that is what stops it: a
    // whole-GPU request never shares a GPU with slices, nor slices a GPU
    // held whole (Slurm's `gpu` and `shard` GRES on one GPU, docs/SLURM.md).
    return core::FailedPreconditionError(placed.message() +
                                         external_.HoldersOf(spec.gpu_uuids, job.request.kind));
  }
  if (!Persist(job, std::nullopt)) {
    capacity_->Release(id);
    capacity_->ForgetDemand(id);
    return core::UnavailableError("daemon degraded (" + degraded_.reason() + "): job not accepted");
  }
  table_.Add(std::move(job));
  Job& held = table_.jobs()[id];
  RecordEvent("submitted", id, held.user,
              held.request.Describe() + ", external" +
                  (held.labels.empty() ? "" : " (" + LabelsText(held.labels) + ")"));
  StartJob(held);
  if (held.state != JobState::kRunning) {
    return core::InternalError("external job " + std::to_string(id) +
                               " could not start: " + held.reason);
  }
  if (spec.paused) {
    SliceLimits limits = SliceLimitsOf(held);
    limits.launches_paused = true;
    if (Status s = regions_.Update(held.region_path, limits); !s.ok()) {
      FinishJob(held, JobState::kFailed, -1, "cannot pause its slice: " + s.message());
      return s.WithContext("pause the slice");
    }
    table_.live()[id].paused = true;
    RecordEvent("paused", id, held.user, "launches held until resumed");
  }
  return reads_.View(held);
}

}  // namespace gpuslice::daemon
