#pragma once

// Fair share and aging: the order of the queue within a priority.
// Pure; the daemon and the queue replay (`gpuslice-replay --queue`) call the
// same functions with their own clocks.
//
// Usage is decayed GPU time, as accounting counts it (docs/ACCOUNTING.md: a
// whole GPU weighs 1, a fraction its compute share or its memory's part of
// the GPU, a MIG instance its slices / 7), each GPU-second weighted by
// 2^(-age / half_life): what a principal (user or group) used a half-life
// ago counts half. Slurm's classic fair-share factor then turns it into a
// number in (0, 1]:
//
//   f(p) = 2 ^ -(u(p) / s(p))
//
// u(p) = p's decayed usage / all principals' of its kind (users, groups),
// s(p) = p's share / the shares of the principals of its kind that are
// active (have usage or live jobs). Shares are 1 unless configured
// (`share.user.NAME`, `share.group.NAME`). A principal that used nothing has
// f = 1; one that used exactly its share, 0.5. A job's factor is the mean of
// its user's and its (primary) group's.
//
// Aging bounds what fair share can do to a job: its age factor is the time
// it has waited over `max_age`, at most 1. A job's rank in the queue is
//
//   rank = fair-share factor + age factor      (fair share off: age only)
//
// Within a priority, a higher rank goes first; equal ranks keep arrival
// order. With fair share off the order is arrival order, as before.

#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "core/jobs/job.h"
#include "core/schedule/quota.h"
#include "core/status.h"

namespace gpuslice::core {

struct FairShareConfig {
  bool enabled = true;
  int64_t half_life_ms = 7LL * 24 * 3600 * 1000;  // 7 days.
  int64_t max_age_ms = 24LL * 3600 * 1000;        // 1 day.
  std::map<Principal, double> shares;             // Absent: 1.

  // Applies `fair_share` (on/off), `fair_share_half_life`, `queue_max_age`
  // (durations) or `share.user.NAME` / `share.group.NAME` (a positive
  // number). *known = false (and Ok) for any other key. Errors name the key
  // and the value.
  Status Apply(std::string_view key, std::string_view value, bool* known);
  double ShareOf(const Principal& p) const;
};

// Decayed GPU-seconds per principal. Charges may come in any order (the
// ledger's history at start, then the running jobs as they run).
class DecayedUsage {
 public:
  explicit DecayedUsage(int64_t half_life_ms) : half_life_ms_(half_life_ms) {}

  // `weight` GPUs held from `from_ms` to `to_ms` (nothing when to <= from).
  void AddInterval(const Principal& who, double weight, int64_t from_ms, int64_t to_ms);
  // Decayed GPU-seconds of `who` as of `now_ms`.
  double At(const Principal& who, int64_t now_ms) const;
  // Every principal's, as of `now_ms`.
  std::map<Principal, double> All(int64_t now_ms) const;
  int64_t half_life_ms() const { return half_life_ms_; }

 private:
  struct Entry {
    double value = 0;  // Decayed GPU-seconds as of `as_of`.
    int64_t as_of = 0;
  };
  double Decay(double value, int64_t dt_ms) const;
  int64_t half_life_ms_;
  std::map<Principal, Entry> entries_;
};

// The fair-share factor of every principal in `active` (and of every one
// with usage), by the formula at the top. Principals of each kind are
// normalised among themselves.
std::map<Principal, double> FairShareFactors(const std::map<Principal, double>& usage,
                                             const std::set<Principal>& active,
                                             const FairShareConfig& config);

// A job's factor: the mean of its user's and its group's (the user's alone
// when `group` is empty); 1 for a principal absent from `factors`.
double JobFairShare(const std::map<Principal, double>& factors, const std::string& user,
                    const std::string& group);

// The rank of a job that has waited `waited_ms` with fair-share factor
// `fair_share` (see the top).
double QueueRank(double fair_share, int64_t waited_ms, const FairShareConfig& config);

// What one job holds, in GPUs, as accounting weighs it: whole GPUs their
// count, a MIG instance its slices / 7, a fraction its share, or, without a
// share, its memory over `gpu_memory` (0 when that is unknown).
double HeldGpuWeight(const ResourceRequest& request, const Allocation& allocation,
                     uint64_t gpu_memory);

}  // namespace gpuslice::core
