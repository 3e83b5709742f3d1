// External jobs' own checks, their holders and their end
// (external_jobs.h). A job bound to its caller (a Slurm step's slurmstepd
// asks with `bound_to_caller`) ends when that process does, and its
// processes are the ones below it: the daemon can end and stop them as it
// does its own. docs/KUBERNETES.md, docs/SLURM.md, docs/API.md.

#include "daemon/external/external_jobs.h"

#include <signal.h>

#include <algorithm>

#include "core/strings.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Result;
using core::Status;

Result<core::ResourceRequest> ExternalJobs::CheckRequest(const core::RequestFields& fields) const {
  GPUSLICE_ASSIGN_OR_RETURN(core::ResourceRequest request, core::BuildRequest(fields));
  if (request.host_cpu_milli != 0 || request.host_memory_bytes != 0) {
    return core::InvalidArgumentError(
        "cpus and host_mem need a cgroup of the daemon's; an external job's processes live in "
        "their engine's cgroups");
  }
  if (request.kind == core::RequestKind::kWholeGpus && request.gpus_min != request.gpus_max) {
    return core::InvalidArgumentError("an external job takes a fixed number of GPUs, not a range");
  }
  return request;
}

Status ExternalJobs::BindToCaller(bool local, const PeerProcess* process, Job* job) const {
  // Only the caller's own process, from the socket's credentials: nobody
  // can tie a slice to someone else's process (or keep one alive with it).
  if (!local || !process) {
    return core::InvalidArgumentError(
        "bound_to_caller needs a caller on the unix socket whose process the daemon can see "
        "(its process holds the slice)");
  }
  // The process pinned at accept, by its pid and start time as read
  // then; running now, so the pair names it and the holder watch
  // (HolderAlive) follows that process, never a later one at its pid.
  GPUSLICE_RETURN_IF_ERROR(process->CheckRunning());
  job->holder_pid = process->pid();
  job->holder_start_time = process->identity().start_time;
  return Status::Ok();
}

uint32_t ExternalJobs::SharedGidOf(const Job& job) const {
  // Only root's external jobs (the device plugin's) need a group: their
  // processes run as whoever the container chose. A user's own external job
  // (a Slurm step) runs as that user, who owns the files as for any job.
  if (job.mode != core::JobMode::kExternal || gid_base_ == 0 || job.uid != 0) {
    return 0;
  }
  return gid_base_ + static_cast<uint32_t>(job.id % kGids);
}

std::string ExternalJobs::HoldersOf(const std::vector<std::string>& uuids,
                                    core::RequestKind wanted) const {
  std::string out;
  for (const std::string& uuid : uuids) {
    std::vector<std::string> whole, shared;
    jobs_.for_each_running([&](const Job& job) {
      const auto& held = job.allocation.gpu_uuids;
      if (std::find(held.begin(), held.end(), uuid) == held.end()) return;
      std::string who = std::to_string(job.id) + " (" + job.user;
      if (auto s = job.labels.find("slurm_job"); s != job.labels.end()) {
        who += ", Slurm job " + s->second;
      }
      who += ")";
      (job.request.kind == core::RequestKind::kWholeGpus ? whole : shared).push_back(who);
    });
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

bool ExternalJobs::HolderAlive(const Job& job) {
  // A holder that ended but is not reaped yet (slurmstepd is not our child,
  // and a container's init may reap late) is gone.
  return job.holder_pid > 0 && launcher_.ProcessAlive(job.holder_pid, job.holder_start_time) &&
         !ProcessIsZombie(job.holder_pid);
}

std::vector<int64_t> ExternalJobs::HeldProcesses(const Job& job) {
  std::vector<int64_t> out;
  if (!HolderAlive(job)) return out;
  ProcessTable& procs = jobs_.processes();
  for (int64_t pid : procs.DescendantsOf(job.holder_pid)) {
    auto owner = procs.OwnerOf(pid);
    if (owner && owner->uid == job.uid && !ProcessIsZombie(pid)) out.push_back(pid);
  }
  return out;
}

void ExternalJobs::SignalHeld(const Job& job, int signal) {
  ProcessTable& procs = jobs_.processes();
  // SignalIfOwnedBy: a pid that ended and was reused by someone else's
  // process since the walk is left alone.
  for (int64_t pid : HeldProcesses(job)) (void)procs.SignalIfOwnedBy(pid, job.uid, signal);
}

bool ExternalJobs::Watch(Job& job, const std::optional<JobState>& ending,
                         const std::string& ending_reason, int64_t* kill_at_ms, int64_t now) {
  if (job.holder_pid > 0 && !HolderAlive(job)) {
    // The step (or whatever held it) is gone, however it ended: scancel, a
    // time limit, a crash of its slurmstepd, a node restart.
    if (ending) {
      jobs_.finish(job, *ending, -1, ending_reason);
    } else {
      jobs_.finish(
          job, JobState::kExited, 0,
          "released: the process that held it (pid " + std::to_string(job.holder_pid) + ") ended");
    }
    return true;
  }
  if (!ending) return false;
  if (job.holder_pid > 0) {
    // Ended by the daemon while its processes run: they get the grace, then
    // SIGKILL; the slice goes when they are gone (the holder may live on).
    if (now >= *kill_at_ms) {
      SignalHeld(job, SIGKILL);
      *kill_at_ms = INT64_MAX;
    }
    if (!HeldProcesses(job).empty()) return false;
  }
  jobs_.finish(job, *ending, -1, ending_reason);
  return true;
}

}  // namespace gpuslice::daemon
