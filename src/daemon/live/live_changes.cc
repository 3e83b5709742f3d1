// LiveChanges: live resize, suspend, resume, move, and a failed
// suspension's fallbacks. See live_changes.h.

#include "daemon/live/live_changes.h"

#include <algorithm>
#include <charconv>
#include <memory>

#include "core/strings.h"
#include "core/units.h"
#include "daemon/base/log.h"
#include "daemon/config/config_check.h"
#include "daemon/elastic/elastic_jobs.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Result;
using core::Status;

namespace {

// Who suspended a job (SuspendCause::by).
std::string SuspendedBy(const Caller& caller) {
  return caller.user.empty() ? "uid " + std::to_string(caller.uid) : caller.user;
}

}  // namespace

Result<JobView> LiveChanges::Resize(const Caller& caller, uint64_t id, const ResizeSpec& spec) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (hooks_.degraded()) {
    return core::UnavailableError("daemon degraded (" + hooks_.degraded_reason() +
                                  "): not resizing");
  }
  if (job.state != JobState::kRunning) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " is " +
                                         std::string(core::JobStateName(job.state)) +
                                         "; only running jobs are resized");
  }
  if (spec.gpus) return ResizeElastic(caller, job, spec);
  std::optional<core::Priority> priority;
  if (spec.priority) {
    auto p = core::ParsePriority(*spec.priority);
    if (!p.ok()) return p.status().WithContext("--priority");
    priority = *p;
    const AccessConfig& access = rules_.access;
    const std::string& pool =
        job.request.pool.empty() ? hooks_.capacity()->pools().default_pool() : job.request.pool;
    GPUSLICE_RETURN_IF_ERROR(
        CheckAccess(access, job.user, job.uid, quotas_.OwnerOf(job).groups, pool, *priority));
    if (!spec.mem && !spec.compute) {
      GPUSLICE_RETURN_IF_ERROR(hooks_.change_priority(caller, job, *priority));
      return hooks_.view(job);
    }
  }
  if (job.request.kind != core::RequestKind::kFraction) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " holds " +
                                         job.request.Describe() +
                                         "; only parts of a GPU (--mem jobs) can be resized, "
                                         "and elastic jobs (--gpus MIN-MAX) with --gpus");
  }
  if (!spec.mem && !spec.compute) {
    return core::InvalidArgumentError("resize needs --mem and/or --compute");
  }
  core::ResourceRequest next = job.request;
  GPUSLICE_RETURN_IF_ERROR(core::ApplySliceSize(spec.mem, spec.compute, &next));
  GPUSLICE_RETURN_IF_ERROR(next.Validate());
  std::string from = job.request.Describe(), to = next.Describe();
  if (next.memory_bytes == job.request.memory_bytes &&
      next.compute_milli == job.request.compute_milli) {
    if (priority) GPUSLICE_RETURN_IF_ERROR(hooks_.change_priority(caller, job, *priority));
    return hooks_.view(job);
  }
  // Quotas: what the job would hold instead of what it holds.
  if (!quotas_.empty()) {
    core::Allocation after = job.allocation;
    after.memory_bytes_per_gpu = next.memory_bytes;
    after.compute_milli = next.compute_milli;
    core::QuotaDecision d = quotas_.Decide(
        quotas_.OwnerOf(job), core::ChargeOfAllocation(next, after), quotas_.RunningUsage(job.id));
    if (d.verdict != core::QuotaVerdict::kFits) {
      return core::ResourceExhaustedError("resize to " + to + " is over quota: " + d.reason);
    }
  }
  // Memory in use: a limit under it is refused unless forced.
  uint64_t used = 0;
  if (auto u = regions_.Usage(job.region_path); u.ok()) {
    for (const SliceUsage& s : *u) used = std::max(used, s.used_bytes);
  }
  if (next.memory_bytes < used && !spec.force) {
    return core::FailedPreconditionError(
        "job " + std::to_string(id) + " uses " + core::FormatBytes(used) + "; a limit of " +
        core::FormatBytes(next.memory_bytes) +
        " is below that (--force applies it anyway: new allocations then fail until its use "
        "falls under the limit)");
  }
  GPUSLICE_RETURN_IF_ERROR(hooks_.capacity()->Resize(id, next));
  SliceLimits limits = hooks_.limits_of(job);
  limits.memory_bytes_per_device = next.memory_bytes;
  limits.compute_milli = next.compute_milli;
  limits.work_conserving = job.request.compute_mode == core::ComputeMode::kWorkConserving;
  hooks_.take_turns(job, &limits);
  if (Status s = regions_.Update(job.region_path, limits); !s.ok()) {
    (void)hooks_.capacity()->Resize(id, job.request);
    return s.WithContext("update the slice");
  }
  job.request.memory_bytes = next.memory_bytes;
  job.request.compute_milli = next.compute_milli;
  job.allocation.memory_bytes_per_gpu = next.memory_bytes;
  job.allocation.compute_milli = next.compute_milli;
  hooks_.save_resize(job);
  transitions_.RecordEvent(
      "resized", id, job.user,
      from + " -> " + to + " by " + CallerName(caller) +
          (next.memory_bytes < used ? " (forced below the " + core::FormatBytes(used) + " in use)"
                                    : ""));
  LogInfo("job " + std::to_string(id) + " resized: " + from + " -> " + to);
  if (priority) GPUSLICE_RETURN_IF_ERROR(hooks_.change_priority(caller, job, *priority));
  // A smaller job leaves room for the queue.
  transitions_.RequestSchedule();
  return hooks_.view(job);
}

Result<JobView> LiveChanges::ResizeElastic(const Caller& caller, Job& job, const ResizeSpec& spec) {
  const std::string name = "job " + std::to_string(job.id);
  if (spec.mem || spec.compute) {
    return core::InvalidArgumentError("--gpus resizes an elastic job; not with --mem or --compute");
  }
  if (!IsElastic(job)) {
    return core::FailedPreconditionError(name + " holds " + job.request.Describe() +
                                         "; only elastic jobs (--gpus MIN-MAX) change their GPU "
                                         "count");
  }
  uint32_t want = 0;
  const std::string& text = *spec.gpus;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), want);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      want < job.request.gpus_min || want > job.request.gpus_max) {
    return core::InvalidArgumentError("--gpus '" + text.substr(0, 32) + "': " + name + " runs on " +
                                      std::to_string(job.request.gpus_min) + " to " +
                                      std::to_string(job.request.gpus_max) + " GPUs");
  }
  const uint32_t held = static_cast<uint32_t>(job.allocation.gpu_indices.size());
  if (want == held) return hooks_.view(job);
  if (want > held && !quotas_.empty()) {
    core::Allocation grown = job.allocation;
    grown.gpu_indices.resize(want, 0);
    core::QuotaDecision d =
        quotas_.Decide(quotas_.OwnerOf(job), core::ChargeOfAllocation(job.request, grown),
                       quotas_.RunningUsage(job.id));
    if (d.verdict != core::QuotaVerdict::kFits) {
      return core::ResourceExhaustedError("resize to " + std::to_string(want) +
                                          " GPUs is over quota: " + d.reason);
    }
  }
  Status s = hooks_.resize_elastic(job, want, "asked by " + caller.user);
  if (!s.ok()) {
    if (s.code() != core::StatusCode::kResourceExhausted) return s;
    return core::ResourceExhaustedError(name + " holds " + std::to_string(held) + " GPUs; " +
                                        std::to_string(want - held) +
                                        " more are not idle in its pool (and on its island) now");
  }
  transitions_.Schedule();
  return hooks_.view(job);
}

Status LiveChanges::Resume(const Caller& caller, uint64_t id) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  auto l = table_.live().find(id);
  if (job.state == JobState::kSuspended && l != table_.live().end()) {
    return suspender_.Resume(job, CallerName(caller));
  }
  if (l == table_.live().end() || !l->second.paused) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " is not paused");
  }
  SliceLimits limits = hooks_.limits_of(job);
  limits.launches_paused = false;
  GPUSLICE_RETURN_IF_ERROR(regions_.Update(job.region_path, limits));
  l->second.paused = false;
  hooks_.unpaused(id);
  transitions_.RecordEvent("resumed", id, job.user,
                           "launches allowed again by " + CallerName(caller));
  return Status::Ok();
}

Status LiveChanges::Suspend(const Caller& caller, uint64_t id) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (job.state == JobState::kSuspended) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " is suspended already");
  }
  auto l = table_.live().find(id);
  if (job.state != JobState::kRunning || l == table_.live().end()) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " is " +
                                         std::string(core::JobStateName(job.state)) +
                                         ": only a running job can be suspended");
  }
  SuspendCause cause;
  cause.by = SuspendedBy(caller);
  return suspender_.Suspend(job, cause);
}

Status LiveChanges::Move(const Caller& caller, uint64_t id, const std::string& gpu) {
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
    for (const GpuInfo& g : hooks_.inventory().gpus) {
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
        name + " cannot move to " + gpu + " (" + target->model + ", pool " +
        hooks_.pool_of(target->index) +
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
  if (NodeCapacity* capacity = hooks_.capacity()) {
    std::unique_ptr<core::CapacityModel> copy = capacity->Clone();
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

void LiveChanges::AfterFailedSuspend(Job& job, const SuspendCause& cause) {
  const uint64_t id = job.id;
  const bool requeue = cause.reclaimed_for != 0 && job.restartable;
  if (cause.idle_fallback) {
    hooks_.idle_fallback(job, *cause.idle_fallback, cause.idle_text);
  } else if (cause.preempted_for != 0 && table_.jobs().count(cause.preempted_for)) {
    hooks_.end_for_preemption(job, cause.preempted_for);
  } else if (requeue) {
    hooks_.requeue_for_reclaim(job, cause.reclaimed_for);
  }
  // Not planned again for a while: it would fail the same way.
  if (cause.defrag_for != 0) hooks_.move_failed(id, clock_.NowMs());
}

}  // namespace gpuslice::daemon
