// FairShareBook: the state of fair share between the daemon's calls
// (fair_share_book.h).

#include "daemon/fairshare/fair_share_book.h"

namespace gpuslice::daemon {

void FairShareBook::Open() { usage_ = std::make_unique<core::DecayedUsage>(config_.half_life_ms); }

void FairShareBook::Charge(const std::string& user, const std::string& group, double weight,
                           int64_t from_ms, int64_t to_ms) {
  if (!usage_) return;
  usage_->AddInterval({core::PrincipalKind::kUser, user}, weight, from_ms, to_ms);
  usage_->AddInterval({core::PrincipalKind::kGroup, group}, weight, from_ms, to_ms);
}

int64_t FairShareBook::AdvanceCharge(uint64_t id, int64_t first_ms, int64_t now_ms) {
  auto [it, fresh] = charged_ms_.try_emplace(id, first_ms);
  const int64_t last = it->second;
  it->second = now_ms;
  return last;
}

void FairShareBook::ForgetEnded(const std::function<bool(uint64_t id)>& live) {
  std::erase_if(charged_ms_, [&](const auto& e) { return !live(e.first); });
}

bool FairShareBook::RankDue(int64_t now_ms, bool force) {
  if (!force && now_ms - ranked_ms_ < kRankEveryMs) return false;
  ranked_ms_ = now_ms;
  return true;
}

void FairShareBook::Rank(const std::set<core::Principal>& active, int64_t now_ms) {
  factors_ = config_.enabled && usage_
                 ? core::FairShareFactors(usage_->All(now_ms), active, config_)
                 : std::map<core::Principal, double>{};
}

}  // namespace gpuslice::daemon
