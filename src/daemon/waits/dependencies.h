#pragma once

// Job dependencies (`gpuslice submit --after 12,13:ok`): which queued jobs
// wait for which, and what each job's end does to those waiting for it.
// docs/DAEMON.md ("Dependencies"), core/jobs/dependency.h.
//
// A queued job with dependencies still live waits: the queue planner holds
// it (it takes nothing, is never the head, delays no backfill) and `ps`
// says what it waits for. Each job's end releases the jobs waiting for it;
// one that ended otherwise than a `:ok` dependency asks cancels them, and
// their own dependents in turn. What waits for what is derived from the
// jobs (job.after, persisted in the ledger) and rebuilt after a restart.
//
// It owns the wait-for graph and nothing else: the jobs are the daemon's
// job table's (Service), read through `Jobs`. One thread, as Service.

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/jobs/dependency.h"
#include "core/jobs/job.h"
#include "core/status.h"

namespace gpuslice::daemon {

// One of a job's dependencies with where its job stands now (unset state:
// the job ended long ago and is no longer in memory).
struct DependencyView {
  core::Dependency dep;
  std::optional<core::JobState> state;
  int exit_code = -1;
};

class JobDependencies {
 public:
  // What it asks of the job table.
  struct Jobs {
    // A job in memory (live, or ended recently); null when it is not.
    std::function<const core::Job*(uint64_t id)> find;
    // A job no longer in memory, from the ledger: nullopt when there is no
    // such job; an error when the ledger cannot be read.
    std::function<core::Result<std::optional<core::Job>>(uint64_t id)> load;
    // Ends queued job `id` as cancelled, with `reason`: a dependency of it
    // broke. Its end comes back to Release (a cascade, taken in turn).
    std::function<void(uint64_t id, std::string reason)> cancel;
    // Queued job `id` no longer waits for any job: it may start.
    std::function<void(uint64_t id)> released;
  };

  explicit JobDependencies(Jobs jobs) : jobs_(std::move(jobs)) {}

  // A submission's --after: every job named exists (in memory or in the
  // ledger) and, if it ended, ended as asked (kInvalidArgument naming the
  // one that did not). Returns the ids it still waits for.
  core::Result<std::vector<uint64_t>> Check(const std::vector<core::Dependency>& after) const;
  // Queued job `id` now waits for `pending` (none: for nothing), replacing
  // what it waited for before.
  void WaitFor(uint64_t id, const std::vector<uint64_t>& pending);
  // After a restart: a queued job read back waits again for its
  // dependencies still live; returns the reason to cancel it when one ended
  // otherwise than asked. Jobs are recovered in id order, so each
  // dependency is in the job table as it stands after recovery.
  std::optional<std::string> Rewait(const core::Job& job);
  // Job `ended_id` ended: its dependents stop waiting for it, and those it
  // broke (--after ID:ok) are cancelled (Jobs::cancel), which goes on to
  // their own dependents: a loop, not a recursion, however long the chain.
  void Release(uint64_t ended_id);

  // Whether queued job `id` waits for a job (held from placement).
  bool Waits(uint64_t id) const { return waiting_on_.count(id) > 0; }
  // Whether any job waits (the planner's hold is needed at all).
  bool AnyWaits() const { return !waiting_on_.empty(); }
  // "after job 12 (running), job 13:ok (queued)"; "" when it waits for none.
  std::string WaitingText(const core::Job& job) const;
  // Each of `job`'s dependencies and where its job stands now.
  std::vector<DependencyView> ViewsOf(const core::Job& job) const;

 private:
  Jobs jobs_;
  // Each queued job that waits -> the jobs it still waits for (live ones),
  // and each such job -> the jobs waiting for it (entries of jobs no longer
  // waiting are skipped).
  std::unordered_map<uint64_t, std::vector<uint64_t>> waiting_on_;
  std::unordered_map<uint64_t, std::vector<uint64_t>> dependents_;
  std::deque<uint64_t> ended_to_release_;  // Release's work list.
  bool releasing_ = false;
};

}  // namespace gpuslice::daemon
