// QuotaKeeper: the quotas, whom each job is charged to, and each queue
// pass's quota verdicts (quota_keeper.h).

#include "daemon/quotas/quota_keeper.h"

#include <utility>

namespace gpuslice::daemon {

using core::Job;
using core::Status;

void QuotaKeeper::NoteGpuMemory(uint64_t memory_total) {
  if (min_gpu_memory_ == 0 || memory_total < min_gpu_memory_) min_gpu_memory_ = memory_total;
}

core::QuotaOwner QuotaKeeper::OwnerOf(const Job& job) {
  auto it = owners_.find(job.uid);
  if (it != owners_.end() && it->second.user == job.user) return it->second;
  core::QuotaOwner o;
  o.user = job.user;
  o.groups = jobs_.groups_of(job.user, job.gid);
  owners_[job.uid] = o;
  return o;
}

core::QuotaCharge QuotaKeeper::RequestCharge(const Job& job) const {
  return core::ChargeOfRequest(job.request, min_gpu_memory_);
}

core::QuotaUsage QuotaKeeper::RunningUsage(uint64_t except_id) {
  core::QuotaUsage usage;
  if (book_.empty()) return usage;
  jobs_.for_each_charged([&](const Job& job) {
    if (job.id == except_id) return;
    book_.AddCharge(OwnerOf(job), core::ChargeOfAllocation(job.request, job.allocation), &usage);
  });
  return usage;
}

std::vector<core::RunningCharge> QuotaKeeper::RunningCharges() {
  std::vector<core::RunningCharge> out;
  jobs_.for_each_charged([&](const Job& job) {
    out.push_back({job.id, OwnerOf(job), core::ChargeOfAllocation(job.request, job.allocation),
                   job.started_ms});
  });
  return out;
}

Status QuotaKeeper::CheckAtSubmit(const Job& job) {
  if (book_.empty()) return Status::Ok();
  if (borrowing_) {
    // A group's quota is a guarantee: a job bigger than it may still run
    // as a borrower, if it can give the capacity back.
    bool borrows = false;
    std::string why;
    core::QuotaDecision d =
        book_.DecideBorrowing(OwnerOf(job), RequestCharge(job), {}, &borrows, &why);
    if (d.verdict == core::QuotaVerdict::kNever) {
      return core::OutOfRangeError("over quota, can never run: " + d.reason);
    }
    if (borrows && !jobs_.borrowable(job)) {
      core::QuotaDecision g = book_.Decide(OwnerOf(job), RequestCharge(job), {});
      if (g.verdict == core::QuotaVerdict::kNever) {
        return core::OutOfRangeError(
            "over quota, can never run: " + g.reason +
            " (beyond a group's quota a job runs only as a borrower, which must be able to give "
            "the capacity back: submit it with --restartable)");
      }
    }
    return Status::Ok();
  }
  core::QuotaDecision d = book_.Decide(OwnerOf(job), RequestCharge(job), {});
  if (d.verdict == core::QuotaVerdict::kNever) {
    return core::OutOfRangeError("over quota, can never run: " + d.reason);
  }
  return Status::Ok();
}

void QuotaKeeper::HoldForQuotas(core::PlanOptions* opt, core::QuotaUsage* usage) {
  opportunistic_now_.clear();
  borrow_why_.clear();
  borrowers_now_.clear();
  if (book_.empty()) {
    quota_wait_.clear();
    return;
  }
  const bool borrowing = borrowing_;
  if (borrowing) {
    const std::vector<core::RunningCharge> running = RunningCharges();
    borrowers_now_ = core::Borrowers(book_, running);
    *usage = book_.UsageWithBorrowers(running, borrowers_now_);
  } else {
    *usage = RunningUsage();
  }
  held_now_.clear();
  opt->held = [this, usage, borrowing](uint64_t id) {
    const Job& job = jobs_.job(id);
    if (!borrowing) {
      core::QuotaDecision d = book_.Decide(OwnerOf(job), RequestCharge(job), *usage);
      if (d.verdict == core::QuotaVerdict::kFits) return false;
      held_now_[id] = d.reason;
      return true;
    }
    bool borrows = false;
    std::string why;
    core::QuotaDecision d =
        book_.DecideBorrowing(OwnerOf(job), RequestCharge(job), *usage, &borrows, &why);
    if (d.verdict != core::QuotaVerdict::kFits) {
      held_now_[id] = d.reason;
      return true;
    }
    if (borrows) {
      if (!jobs_.borrowable(job)) {
        held_now_[id] = why +
                        " (beyond its group's quota only a job that can give the capacity back "
                        "borrows: restartable, or one the daemon can suspend)";
        return true;
      }
      opportunistic_now_.insert(id);
      borrow_why_[id] = why;
    }
    return false;
  };
  opt->opportunistic = [this](uint64_t id) { return opportunistic_now_.count(id) > 0; };
  opt->started = [this, usage](uint64_t id) {
    const Job& job = jobs_.job(id);
    auto a = jobs_.placed(id);
    const core::QuotaCharge charge =
        a ? core::ChargeOfAllocation(job.request, *a) : RequestCharge(job);
    if (opportunistic_now_.count(id)) {
      // A borrower counts against its user's quota only.
      book_.AddCharge(core::QuotaOwner{job.user, {}}, charge, usage);
      borrowers_now_.insert(id);
      return;
    }
    book_.AddCharge(OwnerOf(job), charge, usage);
  };
}

void QuotaKeeper::RecordWaits(
    const std::function<void(uint64_t id, const std::string& reason)>& started_waiting) {
  // Told when a job starts waiting for a quota (or its reason changes), not
  // on every pass.
  for (const auto& [id, reason] : held_now_) {
    auto it = quota_wait_.find(id);
    if (it != quota_wait_.end() && it->second == reason) continue;
    started_waiting(id, reason);
  }
  quota_wait_ = std::move(held_now_);
  held_now_.clear();
}

const std::string* QuotaKeeper::WaitReason(uint64_t id) const {
  auto it = quota_wait_.find(id);
  return it == quota_wait_.end() ? nullptr : &it->second;
}

const std::string* QuotaKeeper::BorrowReason(uint64_t id) const {
  auto it = borrow_why_.find(id);
  return it == borrow_why_.end() ? nullptr : &it->second;
}

bool QuotaKeeper::WouldBorrow(const Job& job, int64_t now_ms) {
  std::vector<core::RunningCharge> running = RunningCharges();
  std::erase_if(running, [&](const core::RunningCharge& r) { return r.id == job.id; });
  running.push_back(
      {job.id, OwnerOf(job), core::ChargeOfAllocation(job.request, job.allocation), now_ms});
  return core::Borrowers(book_, running).count(job.id) > 0;
}

bool QuotaKeeper::Guaranteed(const Job& job) {
  const core::QuotaOwner owner = OwnerOf(job);
  bool guaranteed = false;
  for (const auto& [who, quota] : book_.all()) {
    guaranteed = guaranteed || (who.kind == core::PrincipalKind::kGroup && owner.IsCharged(who));
  }
  return guaranteed;
}

}  // namespace gpuslice::daemon
