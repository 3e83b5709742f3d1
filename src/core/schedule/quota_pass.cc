// QuotaPass: one queue pass's quota verdicts (quota_pass.h).

#include "core/schedule/quota_pass.h"

#include <utility>

namespace gpuslice::core {

QuotaPass::QuotaPass(const QuotaBook& book, bool borrowing, Jobs jobs,
                     const std::vector<RunningCharge>& running)
    : book_(book), borrowing_(borrowing), jobs_(std::move(jobs)) {
  if (book_.empty()) return;
  if (borrowing_) {
    borrowers_ = Borrowers(book_, running);
    usage_ = book_.UsageWithBorrowers(running, borrowers_);
    return;
  }
  for (const RunningCharge& r : running) book_.AddCharge(r.owner, r.charge, &usage_);
}

void QuotaPass::Attach(PlanOptions* options) {
  if (book_.empty()) return;
  options->held = [this](uint64_t id) { return Held(id); };
  options->opportunistic = [this](uint64_t id) { return opportunistic_.count(id) > 0; };
  options->started = [this](uint64_t id) { Started(id); };
}

bool QuotaPass::Held(uint64_t id) {
  if (!borrowing_) {
    QuotaDecision d = book_.Decide(jobs_.owner(id), jobs_.ask(id), usage_);
    if (d.verdict == QuotaVerdict::kFits) return false;
    held_[id] = d.reason;
    return true;
  }
  bool borrows = false;
  std::string why;
  QuotaDecision d = book_.DecideBorrowing(jobs_.owner(id), jobs_.ask(id), usage_, &borrows, &why);
  if (d.verdict != QuotaVerdict::kFits) {
    held_[id] = d.reason;
    return true;
  }
  if (borrows) {
    if (!jobs_.borrowable(id)) {
      held_[id] = why +
                  " (beyond its group's quota only a job that can give the capacity back "
                  "borrows: restartable, or one the daemon can suspend)";
      return true;
    }
    opportunistic_.insert(id);
    borrow_why_[id] = why;
  }
  return false;
}

void QuotaPass::Started(uint64_t id) {
  const QuotaCharge charge = jobs_.started_charge(id);
  if (opportunistic_.count(id)) {
    // A borrower counts against its user's quota only.
    book_.AddCharge(QuotaOwner{jobs_.owner(id).user, {}}, charge, &usage_);
    borrowers_.insert(id);
    return;
  }
  book_.AddCharge(jobs_.owner(id), charge, &usage_);
}

const std::string* QuotaPass::BorrowReason(uint64_t id) const {
  auto it = borrow_why_.find(id);
  return it == borrow_why_.end() ? nullptr : &it->second;
}

bool IsGuaranteed(const QuotaBook& book, const QuotaOwner& owner) {
  for (const auto& [who, quota] : book.all()) {
    if (who.kind == PrincipalKind::kGroup && owner.IsCharged(who)) return true;
  }
  return false;
}

}  // namespace gpuslice::core
