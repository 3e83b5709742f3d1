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

void QuotaKeeper::HoldForQuotas(core::PlanOptions* opt) {
  pass_.reset();
  if (book_.empty()) {
    quota_wait_.clear();
    return;
  }
  core::QuotaPass::Jobs hooks;
  hooks.owner = [this](uint64_t id) { return OwnerOf(jobs_.job(id)); };
  hooks.ask = [this](uint64_t id) { return RequestCharge(jobs_.job(id)); };
  hooks.started_charge = [this](uint64_t id) {
    const Job& job = jobs_.job(id);
    auto a = jobs_.placed(id);
    return a ? core::ChargeOfAllocation(job.request, *a) : RequestCharge(job);
  };
  hooks.borrowable = [this](uint64_t id) { return jobs_.borrowable(jobs_.job(id)); };
  pass_.emplace(book_, borrowing_, std::move(hooks), RunningCharges());
  pass_->Attach(opt);
}

void QuotaKeeper::RecordWaits(
    const std::function<void(uint64_t id, const std::string& reason)>& started_waiting) {
  if (!pass_) return;
  // Told when a job starts waiting for a quota (or its reason changes), not
  // on every pass.
  for (const auto& [id, reason] : pass_->held()) {
    auto it = quota_wait_.find(id);
    if (it != quota_wait_.end() && it->second == reason) continue;
    started_waiting(id, reason);
  }
  quota_wait_ = pass_->held();
}

const std::string* QuotaKeeper::WaitReason(uint64_t id) const {
  auto it = quota_wait_.find(id);
  return it == quota_wait_.end() ? nullptr : &it->second;
}

const std::string* QuotaKeeper::BorrowReason(uint64_t id) const {
  return pass_ ? pass_->BorrowReason(id) : nullptr;
}

const std::set<uint64_t>& QuotaKeeper::borrowers() const {
  static const std::set<uint64_t> kNone;
  return pass_ ? pass_->borrowers() : kNone;
}

const core::QuotaUsage& QuotaKeeper::PassUsage() const {
  static const core::QuotaUsage kNone;
  return pass_ ? pass_->usage() : kNone;
}

bool QuotaKeeper::WouldBorrow(const Job& job, int64_t now_ms) {
  std::vector<core::RunningCharge> running = RunningCharges();
  std::erase_if(running, [&](const core::RunningCharge& r) { return r.id == job.id; });
  running.push_back(
      {job.id, OwnerOf(job), core::ChargeOfAllocation(job.request, job.allocation), now_ms});
  return core::Borrowers(book_, running).count(job.id) > 0;
}

bool QuotaKeeper::Guaranteed(const Job& job) { return core::IsGuaranteed(book_, OwnerOf(job)); }

Status QuotaKeeper::SetQuota(const Caller& caller, const core::Principal& who,
                             const core::Quota& quota) {
  if (!caller.admin) {
    return core::PermissionDeniedError("only root or the admin group may set quotas");
  }
  if (who.name.empty()) return core::InvalidArgumentError("a quota needs a user or group name");
  if (quota.empty()) return core::InvalidArgumentError("a quota needs at least one limit");
  Ledger* ledger = records_.ledger();
  if (!ledger)
    return core::UnavailableError("daemon degraded (" + records_.degraded_reason() +
                                  "): cannot record a quota");
  GPUSLICE_RETURN_IF_ERROR(ledger->SaveQuota(who, quota, records_.now_ms()));
  Set(who, quota);
  records_.record_event("quota_set", CallerName(caller), who.ToString() + ": " + quota.Describe());
  records_.schedule();
  return Status::Ok();
}

Status QuotaKeeper::RemoveQuota(const Caller& caller, const core::Principal& who) {
  if (!caller.admin) {
    return core::PermissionDeniedError("only root or the admin group may remove quotas");
  }
  if (!Find(who)) return core::NotFoundError("no quota for " + who.ToString());
  Ledger* ledger = records_.ledger();
  if (!ledger)
    return core::UnavailableError("daemon degraded (" + records_.degraded_reason() +
                                  "): cannot record a quota");
  GPUSLICE_RETURN_IF_ERROR(ledger->RemoveQuota(who));
  Remove(who);
  records_.record_event("quota_removed", CallerName(caller), who.ToString());
  records_.schedule();
  return Status::Ok();
}

std::vector<QuotaView> QuotaKeeper::Quotas() {
  core::QuotaUsage usage = RunningUsage();
  std::vector<QuotaView> out;
  for (const auto& [who, quota] : all()) {
    auto u = usage.find(who);
    out.push_back({who, quota, u == usage.end() ? core::QuotaCharge{} : u->second});
  }
  return out;
}

}  // namespace gpuslice::daemon
