#pragma once

// Elastic jobs ("--gpus 1-4"; docs/DAEMON.md, "Elastic jobs"). A running
// elastic job gives GPUs back (down to its minimum) when the job first in
// line would then fit, and, if it opted in (`submit --grow`, which puts
// GPUSLICE_ELASTIC_GROW=1 in its environment), takes the idle GPUs when
// nothing waits (all it can at once), at most once per elastic_cooldown.
// The steps are the core's (core/jobs/elastic.h).
//
// It owns when each running elastic job last grew or shrank, and decides
// the steps: the jobs are the daemon's job table's (Service), read through
// `Jobs`; applying a step (the capacity, the slice, the ledger, the GPU
// file, the signal: Service::ApplyElastic) is asked through `Jobs` too.
// One thread, as Service.

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

#include "core/jobs/job.h"
#include "core/status.h"
#include "daemon/base/clock.h"
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
    std::function<const core::Job&(uint64_t id)> job;
    // The placement model (a shrink is tried on a copy of it first).
    std::function<NodeCapacity&()> capacity;
    // Whether head `head_id` preempts jobs now (no shrink for it then).
    std::function<bool(uint64_t head_id)> preempting;
    // Whether `job` holding `count` GPUs fits its owner's quotas.
    std::function<bool(const core::Job& job, uint32_t count)> fits_quotas;
    // Grows or shrinks job `id` to `count` GPUs, `why` for its event
    // (Service::ApplyElastic); an error when it did not.
    std::function<core::Status(uint64_t id, uint32_t count, const std::string& why)> apply;
    // Plans the queue again (a shrink made room for the head).
    std::function<void()> schedule;
  };

  // `rules`: elastic_cooldown_ms; it outlives it.
  ElasticJobs(Jobs jobs, const PolicyConfig& rules, Clock& clock)
      : jobs_(std::move(jobs)), rules_(rules), clock_(clock) {}

  // After each tick, with the head of the queue (0: nothing waits):
  // shrinks elastic jobs when that lets the head fit (checked on a copy of
  // the capacity), else grows those that asked to onto idle GPUs.
  void Adjust(uint64_t head_id);
  // Job `id` grew or shrank at `now_ms` (its cooldown starts).
  void Changed(uint64_t id, int64_t now_ms) { changed_ms_[id] = now_ms; }

 private:
  Jobs jobs_;
  const PolicyConfig& rules_;
  Clock& clock_;
  // Each running elastic job's last grow or shrink (forgotten once it no
  // longer runs: a job that runs again starts its cooldown at its start).
  std::unordered_map<uint64_t, int64_t> changed_ms_;
};

}  // namespace gpuslice::daemon
