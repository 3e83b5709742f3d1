#pragma once

// The job table: every job the daemon holds in memory (live ones and the
// recent finished ones `ps --all` shows), what it keeps of each running or
// suspended job beyond core::Job, the queue in its order, and the indexes
// kept beside them (jobs by owner, queued jobs per uid). Service owns it and
// is the only writer of a job's state (Service::ChangeState); the table
// keeps the maps and their indexes consistent with each other, and answers
// the questions asked of all jobs at once (candidates of a query, counts,
// slices per GPU). One thread, as Service.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/jobs/job.h"
#include "core/schedule/queue.h"

namespace gpuslice::daemon {

// What the daemon keeps of a running or suspended job beyond core::Job
// (not persisted: a restart rebuilds it from the ledger and /proc).
struct LiveState {
  int64_t supervisor_pid = 0;  // 0 when re-adopted or a shell.
  bool supervisor_reaped = false;
  std::optional<core::JobState> ending;  // Cancel or timeout in progress.
  std::string ending_reason;
  int64_t kill_at_ms = 0;            // SIGKILL the group at this time if alive.
  int64_t group_gone_ms = 0;         // First seen without processes.
  std::optional<int> reported_exit;  // Shell jobs.
  // A shell job (or `run -i`) whose process the client had the daemon put
  // in the job's cgroup (Attach): the job is that cgroup, as a launched
  // job is; without it, the attached process alone.
  bool in_cgroup = false;
  // Launches paused (its limits page says so): by idle reclaim, by the
  // watchdog (an external job it cannot kill), or since its submission
  // (an external job asked paused); until `gpuslice resume`.
  bool paused = false;
  int64_t elastic_changed_ms = 0;  // Last grow or shrink (elastic jobs).
};

class JobTable {
 public:
  using Jobs = std::map<uint64_t, core::Job>;

  // Live and recent finished jobs by id. Service changes a job's fields in
  // place; adding and removing jobs goes through Add and TrimHistory, so the
  // owner index stays true.
  Jobs& jobs() { return jobs_; }
  const Jobs& jobs() const { return jobs_; }
  core::Job* Find(uint64_t id);
  const core::Job* Find(uint64_t id) const;

  // Running and suspended jobs only, by id.
  std::map<uint64_t, LiveState>& live() { return live_; }
  const std::map<uint64_t, LiveState>& live() const { return live_; }

  // The id the next job gets: above every id the table has held (ids are
  // never reused, across restarts too: see ContinueIdsAfter).
  uint64_t next_id() const { return next_id_; }
  uint64_t last_id() const { return next_id_ - 1; }
  // After a restart: ids continue after the highest the ledger holds.
  void ContinueIdsAfter(uint64_t max_id) {
    if (max_id + 1 > next_id_) next_id_ = max_id + 1;
  }

  // Adds `job` (a new submission, or one recovered from the ledger) and
  // indexes it by owner; the next id is above it. Replaces a job of the
  // same id.
  core::Job& Add(core::Job job);

  // The queue, sorted by core::QueueBefore (the ranker sorts it again when
  // ranks change). Insert and Remove keep the per-uid counts; whoever sorts
  // it in place keeps its members.
  std::vector<core::QueuedJob>& queue() { return queue_; }
  const std::vector<core::QueuedJob>& queue() const { return queue_; }
  // Inserts `q` (of a job of `uid`) at its place in the order.
  void Enqueue(const core::QueuedJob& q, uint32_t uid);
  // Takes job `id` out of the queue; nothing when it is not queued.
  void Dequeue(uint64_t id);
  // How many jobs of `uid` the queue holds (the per-user queue cap).
  uint32_t QueuedOf(uint32_t uid) const;
  size_t queued_count() const { return queue_.size(); }

  // Running jobs (live and not suspended).
  size_t running_count() const;
  bool IsSuspended(uint64_t id) const;
  // Every live job (queued, running, suspended), by id: counts without a
  // view of each (metrics; 10,000 may wait).
  void ForEachLiveJob(const std::function<void(const core::Job&)>& fn) const;
  // Jobs holding each GPU (by inventory index), for `gpuslice gpus`.
  std::map<uint32_t, std::vector<uint64_t>> SlicesByGpu() const;

  // Calls `visit` with the jobs above id `after_id`, by ascending id, until
  // it returns false: only running and suspended ones when `live_only`,
  // else only those of `users` when it names any, else every job. A query's
  // candidates (requests/job_query.h), each costing only what it visits.
  void VisitCandidates(uint64_t after_id, const std::vector<std::string>& users, bool live_only,
                       const std::function<bool(const core::Job&)>& visit) const;

  // Forgets the oldest finished jobs beyond the `keep` most recent, except
  // those that ended at or after `keep_after_ms` (a client polling for an
  // exit code always finds it). Returns the ids forgotten.
  std::vector<uint64_t> TrimHistory(size_t keep, int64_t keep_after_ms);

 private:
  void Unindex(const core::Job& job);

  uint64_t next_id_ = 1;
  Jobs jobs_;
  std::unordered_map<std::string, std::set<uint64_t>> ids_by_user_;  // Of jobs_, by owner.
  std::map<uint64_t, LiveState> live_;
  std::vector<core::QueuedJob> queue_;
  std::unordered_map<uint32_t, uint32_t> queued_by_uid_;
};

}  // namespace gpuslice::daemon
