#pragma once

// One queue pass's quota verdicts, over core::PlanQueue's hooks
// (PlanOptions::held, opportunistic, started): which queued jobs wait for a
// quota and why, which start as borrowers beyond their group's quota
// (quota.h, "Over-quota borrowing"), and what each job the pass starts adds
// to the usage the next one is decided against. The daemon's QuotaKeeper and
// the queue replay (`gpuslice-replay --queue`, variant `quotas`) both run
// it, so the replay measures the daemon's rules, not a model of them.
//
// Without borrowing every quota is a ceiling: a job that does not fit one
// waits. With it, a group's quota is a guarantee: a job beyond it starts on
// capacity that is idle, as a borrower, if it can give the capacity back;
// one that cannot waits, saying so. User quotas stay ceilings either way.

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/schedule/queue.h"
#include "core/schedule/quota.h"

namespace gpuslice::core {

class QuotaPass {
 public:
  // What it asks of the caller's jobs (queued ones, by id).
  struct Jobs {
    std::function<QuotaOwner(uint64_t id)> owner;
    // What a queued job is charged before it is placed.
    std::function<QuotaCharge(uint64_t id)> ask;
    // What a job this pass started is charged, where it was placed.
    std::function<QuotaCharge(uint64_t id)> started_charge;
    // Whether it can give capacity back (restartable, or suspendable): only
    // such a job borrows.
    std::function<bool(uint64_t id)> borrowable;
  };

  // `book` must outlive the pass. `running`: every running job whose
  // allocation counts against quotas now.
  QuotaPass(const QuotaBook& book, bool borrowing, Jobs jobs,
            const std::vector<RunningCharge>& running);
  QuotaPass(const QuotaPass&) = delete;
  QuotaPass& operator=(const QuotaPass&) = delete;

  // Sets `options`' held, opportunistic and started hooks (nothing when
  // the book has no quota). They point into this pass: it must outlive
  // the plan.
  void Attach(PlanOptions* options);

  // After the plan: the queued jobs held for a quota, with the reason.
  const std::unordered_map<uint64_t, std::string>& held() const { return held_; }
  // The running jobs that borrow beyond a group's quota, those the pass
  // started included.
  const std::set<uint64_t>& borrowers() const { return borrowers_; }
  // Which group quota a queued job borrows beyond (null: it does not).
  const std::string* BorrowReason(uint64_t id) const;
  // The usage the last decision was made against.
  const QuotaUsage& usage() const { return usage_; }

 private:
  bool Held(uint64_t id);
  void Started(uint64_t id);

  const QuotaBook& book_;
  const bool borrowing_;
  Jobs jobs_;
  QuotaUsage usage_;
  std::unordered_map<uint64_t, std::string> held_;
  std::set<uint64_t> opportunistic_;  // Queued borrowers.
  std::unordered_map<uint64_t, std::string> borrow_why_;
  std::set<uint64_t> borrowers_;
};

// Whether some group quota of `owner` applies: a job of its within that
// guarantee may take capacity back from borrowers (over-quota reclaim).
bool IsGuaranteed(const QuotaBook& book, const QuotaOwner& owner);

}  // namespace gpuslice::core
