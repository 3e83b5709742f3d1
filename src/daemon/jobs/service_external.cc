// Service: external jobs (mode external) — a slice held for processes that
// someone else starts: a Kubernetes container (the device plugin asks for it
// in Allocate), later a Slurm step. The daemon launches nothing; the job is
// placed at once or refused (a kubelet admitting a pod cannot wait in our
// queue), holds its slice (region, limits page, CDI device, a seat on the
// GPU's arbiter) like any job, and ends when its owner releases it (cancel)
// or at its maximum run time. A job bound to its caller (a Slurm step's
// slurmstepd asks with `bound_to_caller`) also ends when that process does,
// and its processes are the ones below it: the daemon can end and stop them
// as it does its own. docs/KUBERNETES.md, docs/SLURM.md, docs/API.md.

#include <signal.h>

#include <algorithm>

#include "core/strings.h"
#include "daemon/base/log.h"
#include "daemon/jobs/service.h"
#include "daemon/launch/launcher.h"

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
  GPUSLICE_ASSIGN_OR_RETURN(core::ResourceRequest request, core::BuildRequest(spec.fields));
  if (request.host_cpu_milli != 0 || request.host_memory_bytes != 0) {
    return core::InvalidArgumentError(
        "cpus and host_mem need a cgroup of the daemon's; an external job's processes live in "
        "their engine's cgroups");
  }
  if (request.kind == core::RequestKind::kWholeGpus && request.gpus_min != request.gpus_max) {
    return core::InvalidArgumentError("an external job takes a fixed number of GPUs, not a range");
  }
  const uint64_t id = next_id_;
  GPUSLICE_RETURN_IF_ERROR(capacity_->SetDemand(id, request));
  if (Status ever = capacity_->CouldEverFit(request); !ever.ok()) {
    capacity_->ForgetDemand(id);
    return core::InvalidArgumentError(ever.message());
  }
  Job job = NewJob(caller, id, std::move(request), core::JobMode::kExternal);
  job.labels = std::move(spec.labels);
  if (spec.bound_to_caller) {
    // Only the caller's own process, from the socket's credentials: nobody
    // can tie a slice to someone else's process (or keep one alive with it).
    if (!caller.local || !caller.process) {
      capacity_->ForgetDemand(id);
      return core::InvalidArgumentError(
          "bound_to_caller needs a caller on the unix socket whose process the daemon can see "
          "(its process holds the slice)");
    }
    // The process pinned at accept, by its pid and start time as read
    // then; running now, so the pair names it and the holder watch
    // (HolderAlive) follows that process, never a later one at its pid.
    if (Status running = caller.process->CheckRunning(); !running.ok()) {
      capacity_->ForgetDemand(id);
      return running;
    }
    job.holder_pid = caller.process->pid();
    job.holder_start_time = caller.process->identity().start_time;
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
                                         HoldersOf(spec.gpu_uuids, job.request.kind));
  }
  if (!Persist(job, std::nullopt)) {
    capacity_->Release(id);
    capacity_->ForgetDemand(id);
    return core::UnavailableError("daemon degraded (" + degraded_.reason() + "): job not accepted");
  }
  ++next_id_;
  jobs_[id] = std::move(job);
  IndexJob(jobs_[id]);
  Job& held = jobs_[id];
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
    live_[id].paused = true;
    RecordEvent("paused", id, held.user, "launches held until resumed");
  }
  return View(held);
}

Result<JobView> Service::SetLabels(const Caller& caller, uint64_t id,
                                   std::map<std::string, std::string> labels) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return core::NotFoundError("no job " + std::to_string(id));
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

uint32_t Service::SharedGidOf(const Job& job) const {
  // Only root's external jobs (the device plugin's) need a group: their
  // processes run as whoever the container chose. A user's own external job
  // (a Slurm step) runs as that user, who owns the files as for any job.
  if (job.mode != core::JobMode::kExternal || options_.external_gid_base == 0 || job.uid != 0) {
    return 0;
  }
  return options_.external_gid_base + static_cast<uint32_t>(job.id % kExternalGids);
}

std::string Service::HoldersOf(const std::vector<std::string>& uuids,
                               core::RequestKind wanted) const {
  std::string out;
  for (const std::string& uuid : uuids) {
    std::vector<std::string> whole, shared;
    for (const auto& [id, job] : jobs_) {
      if (job.state != JobState::kRunning) continue;
      const auto& held = job.allocation.gpu_uuids;
      if (std::find(held.begin(), held.end(), uuid) == held.end()) continue;
      std::string who = std::to_string(id) + " (" + job.user;
      if (auto s = job.labels.find("slurm_job"); s != job.labels.end()) {
        who += ", Slurm job " + s->second;
      }
      who += ")";
      (job.request.kind == core::RequestKind::kWholeGpus ? whole : shared).push_back(who);
    }
    if (!whole.empty()) {
      out += "; " + uuid + " is held whole by job " + core::Join(whole, ", ");
      if (wanted != core::RequestKind::kWholeGpus) out += ": a slice cannot share it";
    } else if (!shared.empty()) {
      out += "; " + uuid + " is shared by the slices of job" + (shared.size() > 1 ? "s " : " ") +
             core::Join(shared, ", ");
      if (wanted == core::RequestKind::kWholeGpus) out += ": a whole-GPU request cannot have it";
    }
  }
  return out;
}

bool Service::HolderAlive(const Job& job) {
  // A holder that ended but is not reaped yet (slurmstepd is not our child,
  // and a container's init may reap late) is gone.
  return job.holder_pid > 0 && launcher_.ProcessAlive(job.holder_pid, job.holder_start_time) &&
         !ProcessIsZombie(job.holder_pid);
}

std::vector<int64_t> Service::HeldProcesses(const Job& job) {
  std::vector<int64_t> out;
  if (!HolderAlive(job)) return out;
  ProcessTable& procs = Processes();
  for (int64_t pid : procs.DescendantsOf(job.holder_pid)) {
    auto owner = procs.OwnerOf(pid);
    if (owner && owner->uid == job.uid && !ProcessIsZombie(pid)) out.push_back(pid);
  }
  return out;
}

void Service::SignalHeld(const Job& job, int signal) {
  ProcessTable& procs = Processes();
  // SignalIfOwnedBy: a pid that ended and was reused by someone else's
  // process since the walk is left alone.
  for (int64_t pid : HeldProcesses(job)) (void)procs.SignalIfOwnedBy(pid, job.uid, signal);
}

bool Service::WatchExternal(Job& job, Live& l, int64_t now) {
  if (job.holder_pid > 0 && !HolderAlive(job)) {
    // The step (or whatever held it) is gone, however it ended: scancel, a
    // time limit, a crash of its slurmstepd, a node restart.
    if (l.ending) {
      FinishJob(job, *l.ending, -1, l.ending_reason);
    } else {
      FinishJob(
          job, JobState::kExited, 0,
          "released: the process that held it (pid " + std::to_string(job.holder_pid) + ") ended");
    }
    return true;
  }
  if (!l.ending) return false;
  if (job.holder_pid > 0) {
    // Ended by the daemon while its processes run: they get the grace, then
    // SIGKILL; the slice goes when they are gone (the holder may live on).
    if (now >= l.kill_at_ms) {
      SignalHeld(job, SIGKILL);
      l.kill_at_ms = INT64_MAX;
    }
    if (!HeldProcesses(job).empty()) return false;
  }
  FinishJob(job, *l.ending, -1, l.ending_reason);
  return true;
}

std::string LabelsText(const std::map<std::string, std::string>& labels) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : labels) parts.push_back(k + "=" + v);
  return core::Join(parts, ", ");
}

}  // namespace gpuslice::daemon
