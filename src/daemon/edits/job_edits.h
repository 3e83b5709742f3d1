#pragma once

// Changes to a job's request by its owner or an admin, as a component
// Service owns (docs/DAEMON.md, "Changing queued jobs"): hold and release
// of a queued job (Slurm's `scontrol hold/release`), update of a queued
// job's memory, compute share, priority and dependencies (its `scontrol
// update`), a job's labels, and a running job's priority (Resize's).
//
// It owns no state: a job's hold, request and labels are the job's own (the
// job table's), which jobs are held is JobHolds', which wait for which
// JobDependencies'. Every change is written and evented through
// JobTransitions, which also re-plans the queue; what only the daemon
// knows (whether it can record, the capacity model, the quotas, the queue's
// order, a slice's limits, a job's view) it asks through `Jobs`. One
// thread, as Service.

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/jobs/job.h"
#include "core/jobs/request.h"
#include "core/status.h"
#include "daemon/requests/caller.h"
#include "daemon/requests/job_specs.h"
#include "daemon/requests/job_view.h"
#include "daemon/table/job_table.h"
#include "daemon/table/job_transitions.h"
#include "daemon/waits/dependencies.h"
#include "daemon/waits/holds.h"

namespace gpuslice::daemon {

class JobEdits {
 public:
  // Whether the daemon can record a change now.
  struct Health {
    bool degraded = false;  // Refuses new work (store/degraded_mode.h).
    bool ledger = true;     // Has a ledger to write to (none: degraded at start).
    std::string reason;     // Why it is degraded.
  };

  // What it asks of the daemon and of the other components.
  struct Jobs {
    std::function<Health()> health;
    // `job` as users see it (JobReads::View).
    std::function<JobView(const core::Job& job)> view;
    // The capacity model: whether `request` could ever fit this machine's
    // GPUs, and job `id`'s demand set to it.
    std::function<core::Status(const core::ResourceRequest& request)> could_ever_fit;
    std::function<core::Status(uint64_t id, const core::ResourceRequest& request)> set_demand;
    // The pools and priorities the admin restricted, then the quotas, as
    // at submission (JobIntake::CheckQuotaAtSubmit).
    std::function<core::Status(const core::Job& job)> check_quota;
    // Puts a queued job in the queue at the place its priority and arrival
    // give it (Service::Enqueue).
    std::function<void(const core::Job& job)> enqueue;
    // Writes a running job's slice limits as the job now asks (its turns
    // follow its priority).
    std::function<core::Status(const core::Job& job)> update_slice;
  };

  JobEdits(JobTable& table, JobTransitions& transitions, JobHolds& holds,
           JobDependencies& dependencies, Jobs jobs);

  // Hold keeps a queued job from starting until it is released (owner or
  // admin; an admin's hold on another's job only an admin releases).
  core::Result<JobView> Hold(const Caller& caller, uint64_t id);
  core::Result<JobView> Release(const Caller& caller, uint64_t id);
  // Changes a queued job's memory, compute share, priority or dependencies
  // (owner or admin), checked as a submission is (the machine, the quotas,
  // the priority limits, the jobs named); it keeps its id and its arrival.
  core::Result<JobView> Update(const Caller& caller, uint64_t id, const UpdateSpec& spec);
  // Replaces a live job's labels (owner or admin); the metrics carry them.
  core::Result<JobView> SetLabels(const Caller& caller, uint64_t id,
                                  std::map<std::string, std::string> labels);
  // A running job's priority, changed by `caller` (Resize, which checked
  // the admin's limits): its slice's turns follow at once.
  core::Status ChangePriority(const Caller& caller, core::Job& job, core::Priority priority);

 private:
  JobTable& table_;
  JobTransitions& transitions_;
  JobHolds& holds_;
  JobDependencies& dependencies_;
  Jobs jobs_;
};

}  // namespace gpuslice::daemon
