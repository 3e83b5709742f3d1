#include "core/schedule/fair_share.h"

#include <algorithm>
#include <charconv>

#include "core/jobs/usage.h"

namespace gpuslice::core {
namespace {

constexpr std::string_view kUserShare = "share.user.";
constexpr std::string_view kGroupShare = "share.group.";

Status Bad(std::string_view key, std::string_view value, std::string_view expected) {
  return InvalidArgumentError(std::string(key) + ": expected " + std::string(expected) + ", got '" +
                              std::string(value) + "'");
}

}  // namespace

Status FairShareConfig::Apply(std::string_view key, std::string_view value, bool* known) {
  *known = true;
  if (key == "fair_share") {
    if (value == "on" || value == "true" || value == "yes" || value == "1") {
      enabled = true;
    } else if (value == "off" || value == "false" || value == "no" || value == "0") {
      enabled = false;
    } else {
      return Bad(key, value, "on or off");
    }
    return Status::Ok();
  }
  if (key == "fair_share_half_life" || key == "queue_max_age") {
    auto d = ParseDuration(value);
    if (!d.ok()) return d.status().WithContext(key);
    if (d->count() <= 0) return Bad(key, value, "a positive duration such as 7d");
    (key == "queue_max_age" ? max_age_ms : half_life_ms) = d->count();
    return Status::Ok();
  }
  const bool user = key.substr(0, kUserShare.size()) == kUserShare;
  if (user || key.substr(0, kGroupShare.size()) == kGroupShare) {
    std::string_view name = key.substr(user ? kUserShare.size() : kGroupShare.size());
    if (name.empty()) return InvalidArgumentError(std::string(key) + ": no name");
    double share = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), share);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() || !(share > 0) ||
        share > 1e6) {
      return Bad(key, value, "a positive number such as 2");
    }
    shares[{user ? PrincipalKind::kUser : PrincipalKind::kGroup, std::string(name)}] = share;
    return Status::Ok();
  }
  *known = false;
  return Status::Ok();
}

double FairShareConfig::ShareOf(const Principal& p) const {
  auto it = shares.find(p);
  return it == shares.end() ? 1.0 : it->second;
}

double DecayedUsage::Decay(double value, int64_t dt_ms) const {
  if (dt_ms <= 0 || value == 0) return value;
  return value * std::exp2(-static_cast<double>(dt_ms) / static_cast<double>(half_life_ms_));
}

void DecayedUsage::AddInterval(const Principal& who, double weight, int64_t from_ms,
                               int64_t to_ms) {
  if (to_ms <= from_ms || weight <= 0) return;
  // The integral of weight x 2^(-(to - t) / H) over [from, to], in seconds:
  // the interval's GPU-seconds as they count at its end.
  const double h = static_cast<double>(half_life_ms_) / 1000.0;
  const double span = static_cast<double>(to_ms - from_ms) / 1000.0;
  const double amount = weight * h / std::log(2.0) * (1.0 - std::exp2(-span / h));
  Entry& e = entries_[who];
  const int64_t as_of = std::max(e.as_of, to_ms);
  e.value = Decay(e.value, as_of - e.as_of) + Decay(amount, as_of - to_ms);
  e.as_of = as_of;
}

double DecayedUsage::At(const Principal& who, int64_t now_ms) const {
  auto it = entries_.find(who);
  if (it == entries_.end()) return 0;
  // A charge after `now` (a clock that stepped back) counts undecayed.
  return Decay(it->second.value, now_ms - it->second.as_of);
}

std::map<Principal, double> DecayedUsage::All(int64_t now_ms) const {
  std::map<Principal, double> out;
  for (const auto& [who, e] : entries_) out[who] = Decay(e.value, now_ms - e.as_of);
  return out;
}

std::map<Principal, double> FairShareFactors(const std::map<Principal, double>& usage,
                                             const std::set<Principal>& active,
                                             const FairShareConfig& config) {
  std::set<Principal> all = active;
  for (const auto& [who, u] : usage) {
    if (u > 0) all.insert(who);
  }
  // Totals per kind: usage, and the shares of the principals in play.
  std::map<PrincipalKind, double> used, shares;
  for (const Principal& p : all) {
    auto u = usage.find(p);
    used[p.kind] += u == usage.end() ? 0.0 : u->second;
    shares[p.kind] += config.ShareOf(p);
  }
  std::map<Principal, double> out;
  for (const Principal& p : all) {
    auto u = usage.find(p);
    const double total = used[p.kind];
    const double norm_usage = total > 0 && u != usage.end() ? u->second / total : 0.0;
    const double norm_share = config.ShareOf(p) / shares[p.kind];
    out[p] = std::exp2(-norm_usage / norm_share);
  }
  return out;
}

double JobFairShare(const std::map<Principal, double>& factors, const std::string& user,
                    const std::string& group) {
  auto of = [&](PrincipalKind kind, const std::string& name) {
    auto it = factors.find({kind, name});
    return it == factors.end() ? 1.0 : it->second;
  };
  const double u = of(PrincipalKind::kUser, user);
  if (group.empty()) return u;
  return (u + of(PrincipalKind::kGroup, group)) / 2.0;
}

double QueueRank(double fair_share, int64_t waited_ms, const FairShareConfig& config) {
  const double age =
      config.max_age_ms > 0
          ? std::clamp(static_cast<double>(waited_ms) / static_cast<double>(config.max_age_ms), 0.0,
                       1.0)
          : 0.0;
  return (config.enabled ? fair_share : 0.0) + age;
}

double HeldGpuWeight(const ResourceRequest& request, const Allocation& allocation,
                     uint64_t gpu_memory) {
  switch (request.kind) {
    case RequestKind::kWholeGpus:
      return static_cast<double>(allocation.gpu_indices.size());
    case RequestKind::kMig:
      return static_cast<double>(request.mig.compute_slices) / kMigSlicesPerGpu;
    case RequestKind::kFraction:
      if (allocation.compute_milli > 0) return allocation.compute_milli / 1000.0;
      if (gpu_memory == 0) return 0;
      return static_cast<double>(allocation.memory_bytes_per_gpu) / static_cast<double>(gpu_memory);
  }
  return 0;
}

}  // namespace gpuslice::core
