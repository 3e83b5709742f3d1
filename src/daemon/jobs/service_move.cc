// Service: moving a job to other GPUs (docs/SUSPEND.md, "Moving a job").
//
// A move is a suspension followed by a resume elsewhere: the driver's
// restore takes gpuPairs (old GPU -> new GPU), the slice's limits page is
// renamed to the new GPUs while its processes are checkpointed (their
// compute gates follow it to the new GPU's board), and the job's allocation
// and ledger rows name the new GPUs from the resume on. Used by
// `gpuslice move ID --gpu UUID` and by every resume whose own GPUs lack
// room (a preemption victim resumes wherever its slice fits).

#include <algorithm>

#include "core/placement/relocation.h"
#include "core/strings.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Status;

Status Service::Move(const Caller& caller, uint64_t id, const std::string& gpu) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  const std::string name = "job " + std::to_string(id);
  auto l = table_.live().find(id);
  if ((job.state != JobState::kRunning && job.state != JobState::kSuspended) ||
      l == table_.live().end()) {
    return core::FailedPreconditionError(name + " is " +
                                         std::string(core::JobStateName(job.state)) +
                                         ": only a running or suspended job can be moved");
  }
  if (job.allocation.gpu_uuids.size() != 1) {
    return core::FailedPreconditionError(name + " holds " +
                                         std::to_string(job.allocation.gpu_uuids.size()) +
                                         " GPUs: only a single-GPU job can be moved");
  }
  GPUSLICE_RETURN_IF_ERROR(suspender_.CanMove(job));
  if (job.mode == core::JobMode::kExternal) {
    return core::FailedPreconditionError(name +
                                         " is an external job (Slurm or Kubernetes): its engine "
                                         "placed it");
  }
  // The target: a GPU of this machine (or, for a MIG job, a MIG instance
  // or its GPU) of the job's model and pool.
  const std::vector<std::string> allowed = suspender_.MoveCandidates(job);
  auto gpu_of = [&](const std::string& uuid) -> const GpuInfo* {
    for (const GpuInfo& g : inventory_.gpus) {
      if (g.uuid == uuid) return &g;
      for (const MigInstance& m : g.mig) {
        if (m.uuid == uuid) return &g;
      }
    }
    return nullptr;
  };
  const GpuInfo* target = gpu_of(gpu);
  if (target == nullptr) return core::NotFoundError("no GPU " + gpu + " on this machine");
  if (std::find(allowed.begin(), allowed.end(), target->uuid) == allowed.end()) {
    return core::FailedPreconditionError(
        name + " cannot move to " + gpu + " (" + target->model + ", pool " + PoolOf(target->index) +
        "): a job moves only to a GPU of its own model and pool, where the driver can restore it");
  }
  if (job.allocation.gpu_uuids[0] == gpu || (job.request.kind != core::RequestKind::kMig &&
                                             job.allocation.gpu_uuids[0] == target->uuid)) {
    return core::FailedPreconditionError(name + " is on " + gpu + " already");
  }
  const std::string by = caller.user.empty() ? "uid " + std::to_string(caller.uid) : caller.user;
  if (job.state == JobState::kSuspended) return suspender_.Resume(job, by, {gpu});
  GPUSLICE_RETURN_IF_ERROR(suspender_.CanCheckpoint(job, "move"));
  // Refused before anything is suspended when the target has no room now
  // (it is placed for real once the suspension is done).
  if (capacity_) {
    std::unique_ptr<core::CapacityModel> copy = capacity_->Clone();
    auto* trial = dynamic_cast<NodeCapacity*>(copy.get());
    if (trial != nullptr) {
      trial->Release(id);
      if (Status s = trial->PlaceOn(id, {gpu}); !s.ok()) {
        return core::FailedPreconditionError(name + " cannot move to " + gpu + ": " + s.message());
      }
    }
  }
  SuspendCause cause;
  cause.by = by;
  cause.move_to = gpu;
  return suspender_.Suspend(job, cause);
}

}  // namespace gpuslice::daemon
