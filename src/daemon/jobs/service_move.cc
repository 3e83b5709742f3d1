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

Status Service::CanMove(const Job& job) const {
  const std::string name = "job " + std::to_string(job.id);
  if (!job.image.empty()) {
    return core::FailedPreconditionError(name +
                                         " runs in a container, which reaches only the device "
                                         "nodes of the GPUs it started on");
  }
  if (job.request.kind == core::RequestKind::kWholeGpus &&
      job.request.gpus_min != job.request.gpus_max) {
    return core::FailedPreconditionError(name +
                                         " is elastic: it changes GPUs by growing and "
                                         "shrinking, not by moving");
  }
  return Status::Ok();
}

std::vector<std::string> Service::MoveCandidates(const Job& job) const {
  // GPUs of the model and pool of those it has: the driver restores a
  // process only onto a GPU of the same kind, and a job stays in its pool.
  std::vector<std::string> models, pools;
  for (uint32_t index : job.allocation.gpu_indices) {
    for (const GpuInfo& g : inventory_.gpus) {
      if (g.index != index) continue;
      models.push_back(g.model);
      pools.push_back(PoolOf(g.index));
    }
  }
  std::vector<std::string> out;
  for (const GpuInfo& g : inventory_.gpus) {
    if (std::find(models.begin(), models.end(), g.model) == models.end()) continue;
    if (std::find(pools.begin(), pools.end(), PoolOf(g.index)) == pools.end()) continue;
    out.push_back(g.uuid);
  }
  return out;
}

core::Result<core::Allocation> Service::PlaceForResume(Job& job,
                                                       const std::vector<std::string>& onto) {
  const std::string name = "job " + std::to_string(job.id);
  std::vector<std::string> candidates = onto;
  if (onto.empty()) {
    // Its own GPUs first.
    Status held = capacity_->Hold(job.id, job.allocation);
    if (held.ok()) return job.allocation;
    std::string why = held.message();
    if (held.code() == core::StatusCode::kFailedPrecondition ||
        held.code() == core::StatusCode::kResourceExhausted) {
      why = capacity_->WhyNotNow(job.id);
    }
    const std::string own = name + " cannot resume now: its GPUs (" +
                            core::Join(job.allocation.gpu_uuids, ", ") +
                            ") lack room for its slice: " + why;
    if (!CanMove(job).ok()) return core::FailedPreconditionError(own);
    candidates = MoveCandidates(job);
    if (Status placed = capacity_->PlaceOn(job.id, candidates); !placed.ok()) {
      return core::FailedPreconditionError(own +
                                           "; nor does any other GPU of its model have "
                                           "room");
    }
  } else if (Status placed = capacity_->PlaceOn(job.id, candidates); !placed.ok()) {
    return core::FailedPreconditionError(name + " cannot move to " + core::Join(onto, ", ") + ": " +
                                         placed.message());
  }
  std::optional<core::Allocation> a = capacity_->AllocationOf(job.id);
  if (!a) {
    capacity_->Release(job.id);
    return core::InternalError(name + ": placed, but its allocation is unknown");
  }
  return *a;
}

Status Service::Move(const Caller& caller, uint64_t id, const std::string& gpu) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  const std::string name = "job " + std::to_string(id);
  auto l = live_.find(id);
  if ((job.state != JobState::kRunning && job.state != JobState::kSuspended) || l == live_.end()) {
    return core::FailedPreconditionError(name + " is " +
                                         std::string(core::JobStateName(job.state)) +
                                         ": only a running or suspended job can be moved");
  }
  if (job.allocation.gpu_uuids.size() != 1) {
    return core::FailedPreconditionError(name + " holds " +
                                         std::to_string(job.allocation.gpu_uuids.size()) +
                                         " GPUs: only a single-GPU job can be moved");
  }
  GPUSLICE_RETURN_IF_ERROR(CanMove(job));
  if (job.mode == core::JobMode::kExternal) {
    return core::FailedPreconditionError(name +
                                         " is an external job (Slurm or Kubernetes): its engine "
                                         "placed it");
  }
  // The target: a GPU of this machine (or, for a MIG job, a MIG instance
  // or its GPU) of the job's model and pool.
  const std::vector<std::string> allowed = MoveCandidates(job);
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
  if (job.state == JobState::kSuspended) return StartResume(job, l->second, by, {gpu});
  GPUSLICE_RETURN_IF_ERROR(CanCheckpoint(job, l->second, "move"));
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
  return StartSuspend(job, l->second, cause);
}

}  // namespace gpuslice::daemon
