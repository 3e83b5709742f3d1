// Service: external jobs (mode external) — a slice held for processes that
// someone else starts: a Kubernetes container (the device plugin asks for it
// in Allocate), later a Slurm step. The daemon launches nothing; the job is
// placed at once or refused (a kubelet admitting a pod cannot wait in our
// queue), holds its slice (region, limits page, CDI device, a seat on the
// GPU's arbiter) like any job, and ends when its owner releases it (cancel)
// or at its maximum run time. Taking one in: intake/job_intake.h. Its own
// checks, a bound job's holder and its processes, and its end: the
// component ExternalJobs (external/external_jobs.h). docs/KUBERNETES.md,
// docs/SLURM.md, docs/API.md.

#include "core/strings.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Result;
using core::Status;

Result<JobView> Service::SetLabels(const Caller& caller, uint64_t id,
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
  if (job.labels == labels) return View(job);
  job.labels = std::move(labels);
  Persist(job, job.state);
  RecordEvent("labelled", id, job.user, job.labels.empty() ? "no labels" : LabelsText(job.labels));
  return View(job);
}

}  // namespace gpuslice::daemon
