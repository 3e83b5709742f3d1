// JobIntake: taking in a submission. See job_intake.h.

#include "daemon/intake/job_intake.h"

#include <string>
#include <utility>
#include <vector>

#include "core/strings.h"
#include "daemon/requests/job_text.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Result;
using core::Status;

namespace {

uint64_t TotalBytes(const std::vector<std::string>& v) {
  uint64_t n = 0;
  for (const std::string& s : v) n += s.size() + 1;  // + the NUL execve counts.
  return n;
}

}  // namespace

Status JobIntake::CheckSubmitLimits(const Caller& caller, const SubmitSpec& spec) const {
  const uint64_t env = TotalBytes(spec.env), argv = TotalBytes(spec.argv);
  if (env > options_.max_env_bytes) {
    return core::InvalidArgumentError(
        "the job's environment is " + core::FormatBytes(env) + ", over the limit of " +
        core::FormatBytes(options_.max_env_bytes) +
        " (max_env_bytes in gpusliced's configuration, docs/CONFIG.md); pass large data in a "
        "file instead");
  }
  if (argv > options_.max_argv_bytes) {
    return core::InvalidArgumentError(
        "the job's command line is " + core::FormatBytes(argv) + ", over the limit of " +
        core::FormatBytes(options_.max_argv_bytes) +
        " (max_argv_bytes in gpusliced's configuration, docs/CONFIG.md)");
  }
  if (const uint32_t queued = table_.QueuedOf(caller.uid);
      queued > 0 && queued >= options_.max_queued_jobs_per_user) {
    return core::ResourceExhaustedError(
        "user " + caller.user + " already has " + std::to_string(queued) +
        " queued jobs, the most one user may have (max_queued_jobs_per_user = " +
        std::to_string(options_.max_queued_jobs_per_user) +
        " in gpusliced's configuration, docs/CONFIG.md); wait for some to start or cancel some");
  }
  return Status::Ok();
}

Job JobIntake::NewJob(const Caller& caller, uint64_t id, core::ResourceRequest request,
                      core::JobMode mode) const {
  Job job;
  job.id = id;
  // The owner is the caller's credentials, never anything in the request.
  job.uid = caller.uid;
  job.gid = caller.gid;
  job.user = caller.user;
  job.request = std::move(request);
  job.mode = mode;
  job.submitted_ms = clock_.NowMs();
  return job;
}

Result<JobView> JobIntake::Submit(const Caller& caller, SubmitSpec spec) {
  if (degraded_.degraded())
    return core::UnavailableError("daemon degraded (" + degraded_.reason() +
                                  "): not accepting new jobs");
  if (!caller.local) {
    return core::PermissionDeniedError(
        "jobs can only be submitted over the local socket, so they run as the caller");
  }
  GPUSLICE_RETURN_IF_ERROR(core::ValidateLabels(spec.labels));
  if (options_.slurm_only && !caller.admin) {
    // Only slurmstepd can make such a caller: its real uid is root while it
    // acts as the user, which no user's own process can be. The real uid is
    // the one read when the connection was accepted, and it counts only
    // while that process runs: a pid looked up now could be a root process
    // that took the pid of the user's, which ended.
    const bool stepd = caller.process && caller.process->identity().real_uid == 0;
    if (spec.mode != core::JobMode::kExternal || !spec.bound_to_caller || !stepd) {
      return core::PermissionDeniedError(
          "this node's GPUs are handed out by Slurm (slurm_only): ask for them with srun, "
          "sbatch or salloc (--gres=gpu:N, --gpu-mem, --gpu-share)");
    }
    GPUSLICE_RETURN_IF_ERROR(caller.process->CheckRunning());
  }
  if (spec.mode == core::JobMode::kExternal) return SubmitExternal(caller, std::move(spec));
  if (spec.paused || !spec.gpu_uuids.empty()) {
    return core::InvalidArgumentError(
        "paused and gpu_uuids are for external jobs (mode external) only");
  }
  GPUSLICE_ASSIGN_OR_RETURN(core::ResourceRequest request, core::BuildRequest(spec.fields));
  if (spec.mode != core::JobMode::kShell && spec.argv.empty()) {
    return core::InvalidArgumentError("no command given (gpuslice run [options] -- cmd args...)");
  }
  if (spec.cwd.empty() || spec.cwd[0] != '/') {
    return core::InvalidArgumentError("cwd must be an absolute path, got '" + spec.cwd + "'");
  }
  for (const std::string& e : spec.env) {
    if (e.find('=') == std::string::npos || e[0] == '=') {
      return core::InvalidArgumentError("env entry '" + e.substr(0, 64) + "' is not KEY=value");
    }
  }
  GPUSLICE_RETURN_IF_ERROR(CheckSubmitLimits(caller, spec));
  if (spec.restartable && spec.mode == core::JobMode::kShell) {
    return core::InvalidArgumentError(
        "--restartable: a shell or a command run by the client (run -i) cannot be restarted by "
        "the daemon");
  }
  GPUSLICE_ASSIGN_OR_RETURN(std::vector<uint64_t> pending, dependencies_.Check(spec.after));
  uint64_t id = table_.next_id();
  GPUSLICE_RETURN_IF_ERROR(hooks_.capacity().SetDemand(id, request));
  Status ever = hooks_.capacity().CouldEverFit(request);
  if (!ever.ok()) {
    hooks_.capacity().ForgetDemand(id);
    // Refused at once, never queued forever.
    return core::InvalidArgumentError(ever.message());
  }
  Job job = NewJob(caller, id, std::move(request), spec.mode);
  job.argv = std::move(spec.argv);
  job.cwd = std::move(spec.cwd);
  job.env = std::move(spec.env);
  job.restartable = spec.restartable;
  job.no_idle_reclaim = spec.no_idle_reclaim;
  job.after = std::move(spec.after);
  job.labels = std::move(spec.labels);
  if (Status c = containers_.CheckSpec(spec.image, spec.engine, spec.mode == core::JobMode::kShell,
                                       spec.cwd, &job);
      !c.ok()) {
    hooks_.capacity().ForgetDemand(id);
    return c;
  }
  if (Status q = CheckQuotaAtSubmit(job); !q.ok()) {
    hooks_.capacity().ForgetDemand(id);
    return q;
  }
  if (!transitions_.Persist(job, std::nullopt)) {
    hooks_.capacity().ForgetDemand(id);
    return core::UnavailableError("daemon degraded (" + degraded_.reason() + "): job not accepted");
  }
  table_.Add(job);
  transitions_.RecordEvent(
      "submitted", id, job.user,
      job.request.Describe() +
          (job.after.empty() ? "" : ", after " + core::FormatDependencies(job.after)));
  dependencies_.WaitFor(id, pending);
  hooks_.enqueue(table_.jobs()[id]);
  transitions_.RequestSchedule();
  return hooks_.view(table_.jobs()[id]);
}

Result<JobView> JobIntake::SubmitExternal(const Caller& caller, SubmitSpec spec) {
  if (!spec.argv.empty() || !spec.cwd.empty() || !spec.env.empty() || spec.image || spec.engine ||
      !spec.after.empty() || spec.restartable) {
    return core::InvalidArgumentError(
        "an external job runs nothing: argv, cwd, env, image, engine, after and restartable "
        "do not apply (its processes are started by whoever asked for it)");
  }
  GPUSLICE_ASSIGN_OR_RETURN(core::ResourceRequest request, external_.CheckRequest(spec.fields));
  const uint64_t id = table_.next_id();
  GPUSLICE_RETURN_IF_ERROR(hooks_.capacity().SetDemand(id, request));
  if (Status ever = hooks_.capacity().CouldEverFit(request); !ever.ok()) {
    hooks_.capacity().ForgetDemand(id);
    return core::InvalidArgumentError(ever.message());
  }
  Job job = NewJob(caller, id, std::move(request), core::JobMode::kExternal);
  job.labels = std::move(spec.labels);
  if (spec.bound_to_caller) {
    if (Status bound = external_.BindToCaller(caller.local, caller.process.get(), &job);
        !bound.ok()) {
      hooks_.capacity().ForgetDemand(id);
      return bound;
    }
  }
  if (Status q = CheckQuotaAtSubmit(job); !q.ok()) {
    hooks_.capacity().ForgetDemand(id);
    return q;
  }
  // Never queued, so a quota must have room now, beside what runs.
  if (!quotas_.empty()) {
    core::QuotaDecision d =
        quotas_.Decide(quotas_.OwnerOf(job), quotas_.RequestCharge(job), quotas_.RunningUsage(0));
    if (d.verdict != core::QuotaVerdict::kFits) {
      hooks_.capacity().ForgetDemand(id);
      return core::FailedPreconditionError("over quota now: " + d.reason);
    }
  }
  if (Status placed = hooks_.capacity().PlaceOn(id, spec.gpu_uuids); !placed.ok()) {
    hooks_.capacity().ForgetDemand(id);
    if (placed.code() != core::StatusCode::kFailedPrecondition) return placed;
    // Say who holds the GPUs, and the fence when that is what stops it: a
    // whole-GPU request never shares a GPU with slices, nor slices a GPU
    // held whole (Slurm's `gpu` and `shard` GRES on one GPU, docs/SLURM.md).
    return core::FailedPreconditionError(placed.message() +
                                         external_.HoldersOf(spec.gpu_uuids, job.request.kind));
  }
  if (!transitions_.Persist(job, std::nullopt)) {
    hooks_.capacity().Release(id);
    hooks_.capacity().ForgetDemand(id);
    return core::UnavailableError("daemon degraded (" + degraded_.reason() + "): job not accepted");
  }
  table_.Add(std::move(job));
  Job& held = table_.jobs()[id];
  transitions_.RecordEvent("submitted", id, held.user,
                           held.request.Describe() + ", external" +
                               (held.labels.empty() ? "" : " (" + LabelsText(held.labels) + ")"));
  hooks_.start(held);
  if (held.state != JobState::kRunning) {
    return core::InternalError("external job " + std::to_string(id) +
                               " could not start: " + held.reason);
  }
  if (spec.paused) {
    SliceLimits limits = setup_.SliceLimitsOf(held);
    limits.launches_paused = true;
    if (Status s = regions_.Update(held.region_path, limits); !s.ok()) {
      transitions_.FinishJob(held, JobState::kFailed, -1, "cannot pause its slice: " + s.message());
      return s.WithContext("pause the slice");
    }
    table_.live()[id].paused = true;
    transitions_.RecordEvent("paused", id, held.user, "launches held until resumed");
  }
  return hooks_.view(held);
}

Status JobIntake::CheckQuotaAtSubmit(const Job& job) {
  // Pools and priorities the admin restricted.
  const AccessConfig& access = options_.access;
  if (!access.pools.empty() || access.max_priority != core::Priority::kHigh ||
      !access.group_max_priority.empty()) {
    const std::string& pool =
        job.request.pool.empty() ? hooks_.capacity().pools().default_pool() : job.request.pool;
    GPUSLICE_RETURN_IF_ERROR(CheckAccess(access, job.user, job.uid, quotas_.OwnerOf(job).groups,
                                         pool, job.request.priority));
  }
  return quotas_.CheckAtSubmit(job);
}

}  // namespace gpuslice::daemon
