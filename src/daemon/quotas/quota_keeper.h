#pragma once

// The daemon's quotas (docs/DAEMON.md, "Quotas", "Over-quota borrowing"):
// the quotas the admin set, whom each job is charged to (its user and
// groups), what the running jobs hold against them, and each queue pass's
// verdicts: which queued jobs wait for a quota and why, which start as
// borrowers beyond their group's quota, and which running jobs borrow.
// The rules are the core's (core/schedule/quota.h); this holds their state
// between the daemon's calls.
//
// It owns the quotas and those verdicts, and the admin's verbs that change
// them (SetQuota, RemoveQuota; anyone lists them): the jobs are the
// daemon's job table's (Service), read through `Jobs`; the ledger a quota
// is written to, the event that tells of the change and the plan it calls
// for are asked through `Records` (a change that cannot be recorded is
// refused). One thread, as Service.

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
#include "core/schedule/quota.h"
#include "core/schedule/quota_pass.h"
#include "core/status.h"
#include "daemon/requests/caller.h"
#include "daemon/requests/job_specs.h"
#include "daemon/store/ledger.h"

namespace gpuslice::daemon {

class QuotaKeeper {
 public:
  // What it asks of the job table.
  struct Jobs {
    // Calls `visit` with each running job whose allocation counts against
    // quotas now (a suspended job holds no GPU: only when the admin says
    // it counts).
    std::function<void(const std::function<void(const core::Job&)>& visit)> for_each_charged;
    // A job of the table (the queue plan asks of the queued jobs it holds).
    std::function<const core::Job&(uint64_t id)> job;
    // Where this pass of the queue plan placed job `id` (unset: nowhere).
    std::function<std::optional<core::Allocation>(uint64_t id)> placed;
    // Whether a job can give capacity back (restartable, or suspendable):
    // only such a job borrows beyond its group's quota.
    std::function<bool(const core::Job&)> borrowable;
    // The groups a user belongs to (group quotas).
    std::function<std::vector<std::string>(const std::string& user, uint32_t gid)> groups_of;
  };

  // What the admin's verbs ask of others.
  struct Records {
    // The ledger quotas are written to; null while it is unavailable (the
    // daemon is degraded, `degraded_reason` says why).
    std::function<Ledger*()> ledger;
    std::function<std::string()> degraded_reason;
    std::function<int64_t()> now_ms;
    // An event not about a job (JobTransitions::RecordEvent, job 0).
    std::function<void(std::string kind, std::string user, std::string message)> record_event;
    // Plans the queue now: a changed quota may let queued jobs start, or
    // hold them (JobTransitions::Schedule).
    std::function<void()> schedule;
  };

  // `borrowing`: PolicyConfig::quota_borrowing (a group's quota is a
  // guarantee that jobs able to give capacity back may run beyond).
  QuotaKeeper(Jobs jobs, bool borrowing, Records records = {})
      : jobs_(std::move(jobs)), borrowing_(borrowing), records_(std::move(records)) {}

  // The admin's verbs (docs/DAEMON.md, "Quotas"): set or remove a quota
  // (admins only; written to the ledger, then an event and a new plan),
  // and every quota with what its principal's running jobs hold now.
  core::Status SetQuota(const Caller& caller, const core::Principal& who, const core::Quota& quota);
  core::Status RemoveQuota(const Caller& caller, const core::Principal& who);
  std::vector<QuotaView> Quotas();

  // The quotas (read back from the ledger at start, then as the admin
  // changes them).
  void Set(const core::Principal& who, const core::Quota& quota) { book_.Set(who, quota); }
  bool Remove(const core::Principal& who) { return book_.Remove(who); }
  const core::Quota* Find(const core::Principal& who) const { return book_.Find(who); }
  const std::map<core::Principal, core::Quota>& all() const { return book_.all(); }
  bool empty() const { return book_.empty(); }
  bool borrowing() const { return borrowing_; }

  // A GPU of the machine with `memory_total` bytes: a whole GPU is charged
  // to quotas as the smallest GPU's memory.
  void NoteGpuMemory(uint64_t memory_total);
  uint64_t whole_gpu_bytes() const { return min_gpu_memory_; }

  // Whom `job` is charged to: its user and the user's groups (looked up
  // once per uid, again when the uid's name changes).
  core::QuotaOwner OwnerOf(const core::Job& job);
  // What `job`'s request is charged before it is placed.
  core::QuotaCharge RequestCharge(const core::Job& job) const;
  // What each principal with a quota holds, over the running jobs but
  // `except_id`.
  core::QuotaUsage RunningUsage(uint64_t except_id = 0);
  // Each running job's charge and owner (borrowing's input).
  std::vector<core::RunningCharge> RunningCharges();
  // Whether `ask` fits `owner`'s quotas beside `usage` (QuotaBook::Decide).
  core::QuotaDecision Decide(const core::QuotaOwner& owner, const core::QuotaCharge& ask,
                             const core::QuotaUsage& usage) const {
    return book_.Decide(owner, ask, usage);
  }
  // A submission (or an update of a queued job): kOutOfRange when its
  // quotas can never let it run, saying which and why.
  core::Status CheckAtSubmit(const core::Job& job);

  // A queue pass: sets the plan's `held` (quota waits), `opportunistic`
  // (borrowers) and `started` hooks (core::QuotaPass, kept until the next
  // pass). Nothing when there are no quotas.
  void HoldForQuotas(core::PlanOptions* options);
  // After the pass: the jobs its hooks held for a quota become the waiting
  // ones; `started_waiting` is told of each that waits anew, or for a new
  // reason (an event, not one per pass).
  void RecordWaits(
      const std::function<void(uint64_t id, const std::string& reason)>& started_waiting);
  // Why queued job `id` waits for a quota as of the last pass (null: it
  // does not).
  const std::string* WaitReason(uint64_t id) const;
  // Which group quota queued job `id` borrows beyond as of the last pass
  // (null: it does not borrow).
  const std::string* BorrowReason(uint64_t id) const;
  // The running jobs that borrow beyond their group's quota as of the last
  // pass.
  const std::set<uint64_t>& borrowers() const;
  // What the last pass decided against, the jobs it started included
  // (empty before the first pass and without quotas).
  const core::QuotaUsage& PassUsage() const;
  // Whether `job`, running again from `now_ms` beside the running jobs,
  // would borrow beyond its group's quota.
  bool WouldBorrow(const core::Job& job, int64_t now_ms);
  // Whether some group quota of `job`'s owner applies: within it, the job
  // may take capacity back from borrowers.
  bool Guaranteed(const core::Job& job);

 private:
  Jobs jobs_;
  const bool borrowing_;
  Records records_;
  core::QuotaBook book_;
  std::unordered_map<uint32_t, core::QuotaOwner> owners_;  // By uid, cached.
  uint64_t min_gpu_memory_ = 0;                            // What a whole GPU is charged to quotas.
  std::unordered_map<uint64_t, std::string> quota_wait_;   // Held jobs: why.
  // The last queue pass's verdicts: its holds, queued and running borrowers.
  std::optional<core::QuotaPass> pass_;
};

}  // namespace gpuslice::daemon
