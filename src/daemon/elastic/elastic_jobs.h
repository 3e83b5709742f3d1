#pragma once

// Elastic jobs ("--gpus 1-4"; docs/DAEMON.md, "Elastic jobs"). A running
// elastic job gives GPUs back (down to its minimum) when the job first in
// line would then fit, and, if it opted in (`submit --grow`, which puts
// GPUSLICE_ELASTIC_GROW=1 in its environment), takes the idle GPUs when
// nothing waits (all it can at once), at most once per elastic_cooldown.
// The steps are the core's (core/jobs/elastic.h).
//
// It owns when each running elastic job last grew or shrank, decides the
// steps and applies them (Apply: the capacity, the slice, the GPU file);
// the jobs are the daemon's job table's (Service), read through `Jobs`, and
// so are what a step asks of others: the slice's limits, the ledger's
// resize rows, the signal to the job's processes and its event. One
// thread, as Service.

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

#include "core/jobs/job.h"
#include "core/status.h"
#include "daemon/base/clock.h"
#include "daemon/compute/region_store.h"
#include "daemon/config/policy_config.h"
#include "daemon/makeroom/live_job.h"
#include "daemon/placement/capacity.h"

namespace gpuslice::daemon {

// Whether `job` is elastic: whole GPUs, a range of them.
bool IsElastic(const core::Job& job);

// Writes `<job_dir>/gpus`, the GPUs elastic job `job` holds (one UUID a
// line; format version 1, docs/DAEMON.md): atomically (a reader sees the
// old set or the new one, never half), readable by the job's user.
void WriteGpusFile(const core::Job& job, const std::string& job_dir);

class ElasticJobs {
 public:
  // What it asks of the job table.
  struct Jobs {
    // Calls `visit` with each running or suspended job, by ascending id.
    std::function<void(const std::function<void(const LiveJob&)>& visit)> for_each_live;
    // A job of the table (the head; an elastic job).
    std::function<core::Job&(uint64_t id)> job;
    // The placement model (a shrink is tried on a copy of it first).
    std::function<NodeCapacity&()> capacity;
    // Whether head `head_id` preempts jobs now (no shrink for it then).
    std::function<bool(uint64_t head_id)> preempting;
    // Whether `job` holding `count` GPUs fits its owner's quotas.
    std::function<bool(const core::Job& job, uint32_t count)> fits_quotas;
    // Whether `job` holding `allocation` fits its owner's quotas (true
    // when there are none).
    std::function<bool(const core::Job& job, const core::Allocation& allocation)> fits_quotas_with;
    // Plans the queue again (a shrink made room for the head).
    std::function<void()> schedule;
    // The limits of `job`'s slice as the job is now.
    std::function<SliceLimits(const core::Job& job)> limits_of;
    // Writes `job`'s resize to the ledger (degraded when that fails).
    std::function<void(const core::Job& job)> save_resize;
    // A slice could not be made for lack of room on the state disk.
    std::function<void(const std::string& reason)> no_room;
    // Job `id`'s directory (its gpus file is written there).
    std::function<std::string(uint64_t id)> job_dir;
    // Sends `signal` to process group `pgid`.
    std::function<void(int64_t pgid, int signal)> signal_group;
    // Records an event about job `id`.
    std::function<void(std::string kind, uint64_t id, std::string user, std::string message)>
        record;
  };

  // `rules`: elastic_cooldown_ms, elastic_signal; it and `regions` outlive it.
  ElasticJobs(Jobs jobs, const PolicyConfig& rules, Clock& clock, RegionStore& regions)
      : jobs_(std::move(jobs)), rules_(rules), clock_(clock), regions_(regions) {}

  // After each tick, with the head of the queue (0: nothing waits):
  // shrinks elastic jobs when that lets the head fit (checked on a copy of
  // the capacity), else grows those that asked to onto idle GPUs.
  void Adjust(uint64_t head_id);
  // Job `id` grew or shrank at `now_ms` (its cooldown starts).
  void Changed(uint64_t id, int64_t now_ms) { changed_ms_[id] = now_ms; }
  // Grows or shrinks running elastic job `job` to `count` GPUs, `why` for
  // its event: the capacity model, its slice (recreated with the new
  // devices), the ledger, <job dir>/gpus, then elastic_signal to its
  // processes (CUDA_VISIBLE_DEVICES cannot change inside a running
  // process: the job restarts its workers on the new set). An error
  // (kResourceExhausted: no idle GPU) when the capacity model refused.
  core::Status Apply(core::Job& job, uint32_t count, const std::string& why);
  // An elastic job about to start gives back what its owner's quotas
  // forbid (the queue admitted it by its minimum; it may have been placed
  // on more).
  void FitToQuotas(core::Job& job);

 private:
  Jobs jobs_;
  const PolicyConfig& rules_;
  Clock& clock_;
  RegionStore& regions_;
  // Each running elastic job's last grow or shrink (forgotten once it no
  // longer runs: a job that runs again starts its cooldown at its start).
  std::unordered_map<uint64_t, int64_t> changed_ms_;
};

}  // namespace gpuslice::daemon
