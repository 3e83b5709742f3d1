#pragma once

// Taking in a submission (POST /v1/jobs): who may submit and what, the
// limits one user's queue and one job's environment and command line must
// keep, the pools, priorities and quotas the admin set, and the new job's
// first steps: recorded, told of, queued for the next plan (an external job
// is placed and started at once instead, or refused: docs/KUBERNETES.md).
// It owns none of the state it reads: the jobs are the job table's, the
// machine's capacity NodeCapacity's, the quotas QuotaKeeper's; it writes,
// tells of and plans a job through JobTransitions, and asks Service (through
// `Hooks`) for what is still Service's: queueing a job, starting one, a
// job's view. One thread, as Service.

#include <cstdint>
#include <functional>

#include "core/jobs/job.h"
#include "core/status.h"
#include "daemon/base/clock.h"
#include "daemon/compute/region_store.h"
#include "daemon/config/access.h"
#include "daemon/containers/container_jobs.h"
#include "daemon/external/external_jobs.h"
#include "daemon/placement/capacity.h"
#include "daemon/quotas/quota_keeper.h"
#include "daemon/requests/caller.h"
#include "daemon/requests/job_specs.h"
#include "daemon/requests/job_view.h"
#include "daemon/setup/job_setup.h"
#include "daemon/store/degraded_mode.h"
#include "daemon/table/job_table.h"
#include "daemon/table/job_transitions.h"
#include "daemon/waits/dependencies.h"

namespace gpuslice::daemon {

class JobIntake {
 public:
  // The admin's limits (ServiceOptions, PolicyConfig; docs/CONFIG.md).
  struct Options {
    // A user (not an admin) may only ask for an external job bound to a
    // process whose real uid is root that acts for them (slurmstepd).
    bool slurm_only = false;
    uint32_t max_queued_jobs_per_user = 500;
    uint64_t max_env_bytes = 256 << 10;
    uint64_t max_argv_bytes = 256 << 10;
    // Who may submit to which pool, at which priority.
    AccessConfig access;
  };
  // What it asks of Service.
  struct Hooks {
    // The machine's capacity (made when the daemon starts).
    std::function<NodeCapacity&()> capacity;
    // A new queued job enters the queue (its rank, estimate and shape).
    std::function<void(const core::Job& job)> enqueue;
    // An external job starts at once in the place it was given.
    std::function<void(core::Job& job)> start;
    // The job as the caller is answered.
    std::function<JobView(const core::Job& job)> view;
  };

  JobIntake(Options options, Hooks hooks, JobTable& table, JobTransitions& transitions,
            const DegradedMode& degraded, const ContainerJobs& containers,
            const ExternalJobs& external, JobDependencies& dependencies, QuotaKeeper& quotas,
            const JobSetup& setup, RegionStore& regions, const Clock& clock)
      : options_(std::move(options)),
        hooks_(std::move(hooks)),
        table_(table),
        transitions_(transitions),
        degraded_(degraded),
        containers_(containers),
        external_(external),
        dependencies_(dependencies),
        quotas_(quotas),
        setup_(setup),
        regions_(regions),
        clock_(clock) {}

  // Takes in a job of `caller`'s: refused (kUnavailable while degraded,
  // kPermissionDenied, kInvalidArgument, kResourceExhausted at a limit,
  // kOutOfRange or kPermissionDenied by the quotas and access rules), or
  // recorded, told of ("submitted") and queued for the next plan. An
  // external job is placed and started now, or refused.
  core::Result<JobView> Submit(const Caller& caller, SubmitSpec spec);
  // The pools and priorities the admin restricted, then the quotas
  // (QuotaKeeper::CheckAtSubmit): a submission, or an update of a queued
  // job.
  core::Status CheckQuotaAtSubmit(const core::Job& job);

 private:
  // POST /v1/jobs with mode external (its own checks, holders and end:
  // external/external_jobs.h).
  core::Result<JobView> SubmitExternal(const Caller& caller, SubmitSpec spec);
  // The per-user queue cap and the size limits of a submission.
  core::Status CheckSubmitLimits(const Caller& caller, const SubmitSpec& spec) const;
  // A job of `caller` as submitted now (queued, nothing held).
  core::Job NewJob(const Caller& caller, uint64_t id, core::ResourceRequest request,
                   core::JobMode mode) const;

  const Options options_;
  const Hooks hooks_;
  JobTable& table_;
  JobTransitions& transitions_;
  const DegradedMode& degraded_;
  const ContainerJobs& containers_;
  const ExternalJobs& external_;
  JobDependencies& dependencies_;
  QuotaKeeper& quotas_;
  const JobSetup& setup_;
  RegionStore& regions_;
  const Clock& clock_;
};

}  // namespace gpuslice::daemon
