// Service: a running job's slice as a container of its owner's (or an
// admin's) gets it, for `gpuslice container-args` (the slice itself, the CDI
// specs and container jobs: containers/container_jobs.h).

#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;

core::Result<CdiSlice> Service::ContainerOf(const Caller& caller, uint64_t id) const {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  const Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (job.state != JobState::kRunning || job.region_path.empty()) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " is " +
                                         std::string(core::JobStateName(job.state)) +
                                         ": only a running job has a slice to join");
  }
  return containers_.SliceOf(job);
}

}  // namespace gpuslice::daemon
