#pragma once

// The daemon's fair-share book (docs/DAEMON.md, "Fair share and aging"): the
// decayed GPU use charged to each user and group, how far each running job
// has been charged, and the factors of the last ranking. The formulas are
// the core's (core/schedule/fair_share.h); this holds their state between
// the daemon's calls, and Service feeds it the jobs. One thread, as Service.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>

#include "core/schedule/fair_share.h"

namespace gpuslice::daemon {

class FairShareBook {
 public:
  // The factors are recomputed at most this often (RankDue).
  static constexpr int64_t kRankEveryMs = 1000;

  explicit FairShareBook(core::FairShareConfig config) : config_(std::move(config)) {}

  // Opens the book, at start once the ledger has been read: use is charged
  // from then on. Before, nothing is charged and every factor is 1 (a
  // daemon whose ledger cannot be read ranks by age alone).
  void Open();
  bool open() const { return usage_ != nullptr; }

  // `weight` GPUs held by `user` (of group `group`) from `from_ms` to
  // `to_ms`: the ledger's history at start, a running job's use since its
  // last charge. Nothing while the book is not open.
  void Charge(const std::string& user, const std::string& group, double weight, int64_t from_ms,
              int64_t to_ms);
  // Running job `id` has been charged up to `ms`.
  void MarkCharged(uint64_t id, int64_t ms) { charged_ms_[id] = ms; }
  // Running job `id`'s next charge ends at `now_ms`: returns where its last
  // one ended (`first_ms` for a job not charged yet) and moves that to now.
  int64_t AdvanceCharge(uint64_t id, int64_t first_ms, int64_t now_ms);
  // Forgets the jobs for which `live` is false (charged up to their last
  // AdvanceCharge).
  void ForgetEnded(const std::function<bool(uint64_t id)>& live);

  // Whether a ranking is due at `now_ms` (always when `force`); if so, it is
  // taken as done now.
  bool RankDue(int64_t now_ms, bool force);
  // The factors of `active` (and of every principal with use) as of
  // `now_ms`; none while fair share is off or the book is not open.
  void Rank(const std::set<core::Principal>& active, int64_t now_ms);
  // When the last ranking was (0: never): a job that joins the queue
  // between rankings is ranked as of then, as the others are.
  int64_t ranked_ms() const { return ranked_ms_; }
  // Whether the last ranking gave any factor (JobView shows one then).
  bool ranked() const { return !factors_.empty(); }
  // A job's factor as of the last ranking: its user's and its group's
  // ("" : the user's alone), 1 for a principal without one.
  double FactorOf(const std::string& user, const std::string& group) const {
    return core::JobFairShare(factors_, user, group);
  }
  const core::FairShareConfig& config() const { return config_; }

 private:
  core::FairShareConfig config_;
  std::unique_ptr<core::DecayedUsage> usage_;
  std::unordered_map<uint64_t, int64_t> charged_ms_;  // Running job -> charged up to.
  std::map<core::Principal, double> factors_;         // As of the last ranking.
  int64_t ranked_ms_ = 0;
};

}  // namespace gpuslice::daemon
