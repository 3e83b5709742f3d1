#pragma once

// What an owner or admin changes on a running or suspended job
// (docs/DAEMON.md, "Policies"; docs/SUSPEND.md): a live resize (of a
// fraction's memory and compute share, or of an elastic job's GPU count),
// suspend, resume (of a suspended job, or of one paused by idle reclaim),
// a move to another GPU, and what a suspension that failed does instead,
// by its cause.
//
// It owns the checks and the order of these changes, and nothing that
// lasts: the jobs and their live state are the job table's, the checkpoint
// work is the Suspender's (it decides, the Suspender does), the quotas are
// the QuotaKeeper's. It asks through `Hooks` for what other parts own: a
// job's view, a priority change, the slice's limits, the capacity model,
// the inventory and pools, degraded mode, the ledger's resize rows, an
// elastic job's step, and the fallbacks of idle reclaim, preemption and
// defragmentation. Events, and planning the queue again, go through
// JobTransitions. One thread, as Service.

#include <cstdint>
#include <functional>
#include <string>

#include "core/jobs/job.h"
#include "core/status.h"
#include "daemon/base/clock.h"
#include "daemon/compute/region_store.h"
#include "daemon/config/policy_config.h"
#include "daemon/node/inventory.h"
#include "daemon/placement/capacity.h"
#include "daemon/quotas/quota_keeper.h"
#include "daemon/requests/caller.h"
#include "daemon/requests/job_specs.h"
#include "daemon/requests/job_view.h"
#include "daemon/suspend/suspender.h"
#include "daemon/table/job_table.h"
#include "daemon/table/job_transitions.h"

namespace gpuslice::daemon {

class LiveChanges {
 public:
  // What it asks of the other parts of the daemon.
  struct Hooks {
    // What the caller is answered about `job` (its view).
    std::function<JobView(const core::Job& job)> view;
    // Changes a running job's priority (the slice's turns follow it).
    std::function<core::Status(const Caller& caller, core::Job& job, core::Priority priority)>
        change_priority;
    // The limits of `job`'s slice as the job is now.
    std::function<SliceLimits(const core::Job& job)> limits_of;
    // A fraction without a compute share takes turns anyway, last.
    std::function<void(const core::Job& job, SliceLimits* limits)> take_turns;
    // The placement model; null before Start.
    std::function<NodeCapacity*()> capacity;
    // The GPUs of this machine, and the pool of one (by index).
    std::function<const InventorySnapshot&()> inventory;
    std::function<const std::string&(uint32_t gpu_index)> pool_of;
    // Whether new work is refused, and why.
    std::function<bool()> degraded;
    std::function<std::string()> degraded_reason;
    // Writes `job`'s resize to the ledger (degraded when that fails).
    std::function<void(const core::Job& job)> save_resize;
    // Grows or shrinks elastic job `job` to `count` GPUs
    // (ElasticJobs::Apply).
    std::function<core::Status(core::Job& job, uint32_t count, const std::string& why)>
        resize_elastic;
    // Job `id`, paused by idle reclaim, may launch again (IdleReclaim).
    std::function<void(uint64_t id)> unpaused;
    // A failed suspension's fallbacks, by its cause: idle reclaim's own
    // action, preemption's end, a reclaim's requeue, and no
    // defragmentation move of the job for a while.
    std::function<void(core::Job& job, IdleAction action, const std::string& idle)> idle_fallback;
    std::function<void(core::Job& job, uint64_t preempted_for)> end_for_preemption;
    std::function<void(core::Job& job, uint64_t reclaimed_for)> requeue_for_reclaim;
    std::function<void(uint64_t id, int64_t now_ms)> move_failed;
  };

  // `table`, `suspender`, `quotas`, `regions`, `transitions`, `rules` and
  // `clock` outlive it.
  LiveChanges(JobTable& table, Suspender& suspender, QuotaKeeper& quotas, RegionStore& regions,
              JobTransitions& transitions, const PolicyConfig& rules, Clock& clock, Hooks hooks)
      : table_(table),
        suspender_(suspender),
        quotas_(quotas),
        regions_(regions),
        transitions_(transitions),
        rules_(rules),
        clock_(clock),
        hooks_(std::move(hooks)) {}

  // Live resize of a running fraction (owner or admin): within its quotas
  // and its GPU; below the memory it uses only with `force`. Or, with
  // `gpus`, of a running elastic job: to that many GPUs within its range
  // (growing onto idle GPUs of its pool and island, within its quotas).
  core::Result<JobView> Resize(const Caller& caller, uint64_t id, const ResizeSpec& spec);
  // Lets a job paused by idle reclaim launch again, or resumes a suspended
  // job (owner or admin). A suspended job is put back on the GPUs it had,
  // which must have room for its slice again (kFailedPrecondition saying
  // what is missing otherwise); the restore itself runs on a worker thread
  // (flag "resuming" until it is done).
  core::Status Resume(const Caller& caller, uint64_t id);
  // Suspends a running job (owner or admin): its CUDA processes are locked
  // and checkpointed by the driver (their device memory moved to host
  // memory), then its slice stops counting against its GPUs. Returns at
  // once with the flag "suspending"; the job becomes `suspended`, or stays
  // running with JobView::checkpoint_error, when the worker is done.
  core::Status Suspend(const Caller& caller, uint64_t id);
  // Moves a single-GPU job onto GPU `gpu` (owner or admin): a running job
  // is suspended and resumed there (flags "suspending", then "resuming"),
  // a suspended one resumed there. Refused at once when the target is not
  // of the job's model and pool, or has no room now.
  core::Status Move(const Caller& caller, uint64_t id, const std::string& gpu);
  // A suspension that failed (the Suspender asks): what its cause does
  // instead (idle reclaim's fallback, preemption's end, a reclaim's
  // requeue, no defragmentation move of it for a while).
  void AfterFailedSuspend(core::Job& job, const SuspendCause& cause);

 private:
  // Resize's --gpus: an elastic job to a GPU count the caller asked for.
  core::Result<JobView> ResizeElastic(const Caller& caller, core::Job& job, const ResizeSpec& spec);

  JobTable& table_;
  Suspender& suspender_;
  QuotaKeeper& quotas_;
  RegionStore& regions_;
  JobTransitions& transitions_;
  const PolicyConfig& rules_;
  Clock& clock_;
  Hooks hooks_;
};

}  // namespace gpuslice::daemon
