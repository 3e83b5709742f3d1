#pragma once

// What a job looks like to users, as a component Service owns: a job's view
// (its usage, flags, dependencies, and for a waiting job its place in line
// and why it waits), the lists and pages of jobs, their summary, a job's
// history and logs, and event text with a job's environment values removed.
//
// It owns the waiting board of the last queue plan: each waiting job's
// position and reason, and the head (Schedule publishes them with SetPlan).
// The text of a reason is made only when someone looks (View), not on every
// pass. Everything else it reads from the job table, or asks of the
// components that know it through `Jobs` (the ledger, the queue plan, the
// suspender, the ranker, the capacity model, quotas, preemption and moves).
// One thread, as Service.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/jobs/job.h"
#include "core/schedule/queue.h"
#include "core/status.h"
#include "daemon/base/clock.h"
#include "daemon/requests/caller.h"
#include "daemon/requests/job_query.h"
#include "daemon/requests/job_view.h"
#include "daemon/store/ledger.h"
#include "daemon/table/job_table.h"
#include "daemon/usage/usage_book.h"
#include "daemon/waits/dependencies.h"

namespace gpuslice::daemon {

class JobReads {
 public:
  // When the job first in line is expected to start (its reservation).
  struct HeadStart {
    int64_t start_ms = 0;
    bool estimated = false;  // By run-time estimates, not maximum run times.
  };

  // What it asks of the daemon and of the other components.
  struct Jobs {
    // Runs a queue plan that submissions deferred (Service::Flush), so that
    // positions are current.
    std::function<void()> flush;
    // Job `id`'s transitions from the ledger (an error while it is unavailable).
    std::function<core::Result<std::vector<Transition>>(uint64_t id)> transitions;
    // The pool of a GPU (by inventory index).
    std::function<const std::string&(uint32_t gpu)> pool_of;

    // A job's flags, from the components that set them, in this order.
    std::function<std::vector<std::string>(uint64_t id)> suspend_flags;  // Suspender.
    std::function<bool(uint64_t id)> idle;                               // Idle reclaim.
    std::function<void(uint64_t id, std::vector<std::string>* flags)> watchdog_flags;
    std::function<bool(uint64_t id)> borrowing;  // Over its group's quota.

    // What a view shows of a job.
    std::function<std::vector<DependencyView>(const core::Job& job)> dependencies;
    std::function<std::optional<JobUsage>(uint64_t id)> usage;
    std::function<std::string(uint64_t id)> checkpoint_error;
    std::function<std::optional<double>(const core::Job& job)> fair_share;
    // When a suspended job's processes asked to be resumed (0: they did not).
    std::function<int64_t(uint64_t id)> resume_asked_ms;

    // Why a waiting job waits.
    std::function<std::string(uint64_t id)> why_not_now;           // The capacity model.
    std::function<std::string(uint64_t head)> preempt_text;        // Preemption for the head.
    std::function<std::optional<HeadStart>()> head_start;          // The ranker's reservation.
    std::function<std::string(uint64_t head)> defrag_text;         // Moves for the head.
    std::function<const std::string*(uint64_t id)> borrow_reason;  // Quotas; null: none.
    std::function<const std::string*(uint64_t id)> quota_wait;     // Quotas; null: none.
    std::function<bool(uint64_t id)> waits_for_dependencies;
    std::function<std::string(const core::Job& job)> dependency_text;
  };

  // `jobs_dir`: where each job's directory (its logs) is, <state dir>/jobs.
  // `default_pool`: the pool of a job that names none (PolicyConfig's; it
  // must outlive this).
  JobReads(const JobTable& table, const Clock& clock, std::string jobs_dir,
           const std::string& default_pool, Jobs jobs);

  // Publishes a queue plan: its waiting jobs, in order, and its head (0:
  // none). The index over them is rebuilt on the next lookup.
  void SetPlan(std::vector<core::WaitingJob> waiting, uint64_t head);
  // The board changed under the index (a job left the queue): rebuilt on
  // the next lookup.
  void MarkStale() { waiting_index_stale_ = true; }
  // The last plan's head (0: none).
  uint64_t plan_head() const { return plan_head_; }

  // `job` with what only the live daemon knows.
  JobView View(const core::Job& job);
  // Get, List, Query and Summary first run a pending queue plan, so
  // positions are current.
  core::Result<JobView> Get(uint64_t id);
  std::vector<JobView> List(bool include_finished);
  // The jobs `query` asks for, a page at a time (job_query.h). The page
  // costs the jobs it holds: candidates come by ascending id from the
  // cursor on (from the owners' own lists when it names users, from the
  // running jobs when it asks for those only), and a job gets its full
  // view only once it is on the page.
  JobPage Query(const JobQuery& query);
  // Every job `query` matches, collapsed (JobSummaryBuilder); the limit
  // applies to the groups.
  JobSummary Summary(const JobQuery& query);
  core::Result<std::vector<Transition>> History(uint64_t id);
  // Up to `limit` bytes (at most 4 MiB) of the owner's (or an admin's) job's
  // "stdout" or "stderr" from `offset` on.
  core::Result<LogChunk> ReadLog(const Caller& caller, uint64_t id, const std::string& stream,
                                 uint64_t offset, uint64_t limit) const;
  // `text` (an event's message about job `job_id`) without that job's
  // environment values, for anyone to read.
  std::string PublicText(uint64_t job_id, std::string text) const;
  // A live job's flags ("idle", "paused", "borrowing", "outside_pool"...).
  std::vector<std::string> FlagsOf(uint64_t id) const;
  // Why a running or suspended job holds GPUs outside the pool it asked for
  // (the admin moved them to another pool, or removed its pool, while it
  // ran: docs/DAEMON.md, "Restart and recovery"); "" when it does not.
  std::string OutsidePoolText(const core::Job& job) const;

 private:
  // Why waiting job `job` waits, from its entry on the board.
  void Explain(const core::Job& job, const core::WaitingJob& wj, JobView* v) const;

  const JobTable& table_;
  const Clock& clock_;
  const std::string jobs_dir_;
  const std::string& default_pool_;
  Jobs jobs_;

  // From the last plan: each waiting job's position and reason.
  std::vector<core::WaitingJob> last_waiting_;
  std::unordered_map<uint64_t, size_t> waiting_index_;  // Built on first lookup.
  bool waiting_index_stale_ = true;
  uint64_t plan_head_ = 0;
};

}  // namespace gpuslice::daemon
