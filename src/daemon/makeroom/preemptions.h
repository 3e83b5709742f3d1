#pragma once

// Ending or suspending running jobs so that the head of the queue starts
// (docs/DAEMON.md, "Preemption", "Over-quota borrowing"): priority
// preemption ends (or suspends) jobs of lower priority, and the reclaim of
// borrowed capacity suspends (or requeues) jobs running beyond their
// group's quota, for a head within its group's. The victims are the core's
// choice (core/schedule/preemption.h); this remembers, per head, whom it
// ends or suspends (nothing more is done for that head until they are
// gone) and why it cannot, and says so in the head's reason.
//
// It owns those victims and notes and nothing else: the jobs are the
// daemon's job table's (Service), read through `Jobs`; a victim's end and
// suspension are Service's, asked through `Jobs` too (a job's state changes
// only in Service::ChangeState). One thread, as Service.

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
#include "core/status.h"
#include "daemon/base/clock.h"
#include "daemon/config/policy_config.h"
#include "daemon/launch/checkpointer.h"
#include "daemon/makeroom/live_job.h"

namespace gpuslice::daemon {

class Preemptions {
 public:
  // What it asks of the job table.
  struct Jobs {
    // Calls `visit` with each running or suspended job, by ascending id.
    std::function<void(const std::function<void(const LiveJob&)>& visit)> for_each_live;
    // Job `id` when it is running or suspended; unset otherwise.
    std::function<std::optional<LiveJob>(uint64_t id)> live;
    // A job of the table (a head, queued; a victim).
    std::function<const core::Job&(uint64_t id)> job;
    // The placement model in which the victims' end must make the head fit.
    std::function<const core::CapacityModel&()> capacity;
    // Starts suspending running job `id` (a worker thread does it); an
    // error when it cannot start.
    std::function<core::Status(uint64_t id, const SuspendToMakeRoom& why)> suspend;
    // Starts ending running job `id`: SIGTERM to its process group (and
    // SIGHUP to a shell's, with `hang_up`), SIGKILL at `kill_at_ms`; once
    // its processes are gone it becomes `then` (queued again, or
    // cancelled) with `reason`.
    std::function<void(uint64_t id, core::JobState then, std::string reason, int64_t kill_at_ms,
                       bool hang_up)>
        end;
    // Records an event (Service::RecordEvent).
    std::function<void(std::string kind, uint64_t job_id, std::string user, std::string message)>
        record;
  };
  // What it asks of the quotas (quotas/quota_keeper.h) for the reclaim.
  struct Quotas {
    // Whether a job may borrow at all: borrowing is on and quotas are set.
    std::function<bool()> borrowing;
    // The running jobs that borrow beyond their group's quota (the last
    // queue pass's).
    std::function<const std::set<uint64_t>&()> borrowers;
    // Whether some group quota of `job`'s owner applies to it.
    std::function<bool(const core::Job& job)> guaranteed;
    // What a whole GPU is charged (a victim's weight).
    std::function<uint64_t()> whole_gpu_bytes;
  };

  // `rules`: the preemption policy, its grace and whether victims are
  // suspended; `checkpointer`: the driver's checkpoint API, null when the
  // daemon has none. Both outlive it.
  Preemptions(Jobs jobs, Quotas quotas, const PolicyConfig& rules, Checkpointer* checkpointer,
              Clock& clock)
      : jobs_(std::move(jobs)),
        quotas_(std::move(quotas)),
        rules_(rules),
        checkpointer_(checkpointer),
        clock_(clock) {}

  // Priority preemption for head `head_id` (0: none), which does not fit:
  // ends, or suspends where the driver can checkpoint, the cheapest set of
  // lower-priority running jobs whose end lets it start (never an external
  // job, one already ending, suspended or busy with a checkpoint). Nothing
  // while the head's earlier victims still run.
  void Preempt(uint64_t head_id);
  // Reclaim for head `head_id` within its group's guarantee: suspends the
  // cheapest set of borrowers whose capacity lets it start (a restartable
  // one that cannot be suspended is requeued; another runs on).
  void Reclaim(uint64_t head_id);
  // A preemption victim is ended for head `head_id` (requeued when
  // restartable): Preempt's way, and what follows a failed suspension.
  void EndForPreemption(const core::Job& victim, uint64_t head_id);
  // A borrower is requeued for head `head_id` (the same for a reclaim).
  void RequeueForReclaim(const core::Job& victim, uint64_t head_id);
  // Forgets each head's preemption and reclaim once none of its victims
  // still runs (a suspended victim holds nothing; one being suspended
  // still does). After each queue pass.
  void Forget();

  // Whether head `head_id` preempts jobs now (their end is awaited).
  bool Preempting(uint64_t head_id) const { return preempting_.count(head_id) > 0; }
  // For the head's reason: "; preempting job(s) 3, 4" or "; cannot
  // preempt: ...", then "; taking its group's quota back from job(s) 5";
  // "" when neither.
  std::string WaitingText(uint64_t head_id) const;
  // Whether `job` can give capacity back (restartable, or suspendable):
  // only such a job borrows beyond its group's quota.
  bool Borrowable(const core::Job& job) const;

 private:
  Jobs jobs_;
  Quotas quotas_;
  const PolicyConfig& rules_;
  Checkpointer* checkpointer_;
  Clock& clock_;
  std::map<uint64_t, std::vector<uint64_t>> preempting_;    // Head -> its victims.
  std::unordered_map<uint64_t, std::string> preempt_note_;  // Head -> why it cannot.
  std::map<uint64_t, std::vector<uint64_t>> reclaiming_;    // Head -> borrowers it reclaims from.
  std::unordered_map<uint64_t, std::string> reclaim_note_;  // Head -> why it cannot.
};

}  // namespace gpuslice::daemon
