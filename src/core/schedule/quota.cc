#include "core/schedule/quota.h"

#include <algorithm>
#include <charconv>

#include "core/units.h"

namespace gpuslice::core {
namespace {

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

Result<uint32_t> ParseCount(std::string_view field, std::string_view text) {
  uint32_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return InvalidArgumentError(std::string(field) + ": bad count " + Quote(text) +
                                ": expected a whole number such as '2'");
  }
  return v;
}

// A compute total in per-mille: "150%", "150", "12.5%"; may exceed 100%.
Result<uint32_t> ParseComputeTotal(std::string_view text) {
  std::string_view s = text;
  if (!s.empty() && s.back() == '%') s.remove_suffix(1);
  std::string_view whole = s, frac;
  if (size_t dot = s.find('.'); dot != std::string_view::npos) {
    whole = s.substr(0, dot);
    frac = s.substr(dot + 1);
  }
  uint32_t pct = 0;
  auto [end, ec] = std::from_chars(whole.data(), whole.data() + whole.size(), pct);
  bool frac_ok = frac.size() == 1 && frac[0] >= '0' && frac[0] <= '9';
  if (whole.empty() || ec != std::errc() || end != whole.data() + whole.size() ||
      (s.size() != whole.size() && !frac_ok) || pct > 100'000) {
    return InvalidArgumentError("--compute: bad compute total " + Quote(text) +
                                ": expected a percentage such as '150%' (100% = one GPU)");
  }
  return pct * 10 + (frac.empty() ? 0 : static_cast<uint32_t>(frac[0] - '0'));
}

// The first limit of `q` that `ask` on top of `used` exceeds, as text.
// `used` is zero when checking whether the request alone could ever fit.
std::optional<std::string> Exceeds(const Principal& who, const Quota& q, const QuotaCharge& used,
                                   const QuotaCharge& ask, bool alone) {
  std::string p = who.ToString() + ": ";
  if (q.jobs && used.jobs + ask.jobs > *q.jobs) {
    if (alone) return p + "quota allows no running job (jobs 0)";
    return p + std::to_string(used.jobs) + " of " + std::to_string(*q.jobs) +
           " running jobs in use, asks " + std::to_string(ask.jobs) + " more";
  }
  if (q.memory_bytes && used.memory_bytes + ask.memory_bytes > *q.memory_bytes) {
    if (alone) {
      return p + "asks " + FormatBytes(ask.memory_bytes) + " of memory, over its quota of " +
             FormatBytes(*q.memory_bytes);
    }
    return p + "memory " + FormatBytes(used.memory_bytes) + " of " + FormatBytes(*q.memory_bytes) +
           " in use, asks " + FormatBytes(ask.memory_bytes);
  }
  if (q.gpus && used.gpus + ask.gpus > *q.gpus) {
    if (alone) {
      return p + "asks " + std::to_string(ask.gpus) + " whole GPU" + (ask.gpus == 1 ? "" : "s") +
             ", over its quota of " + std::to_string(*q.gpus);
    }
    return p + std::to_string(used.gpus) + " of " + std::to_string(*q.gpus) +
           " whole GPUs in use, asks " + std::to_string(ask.gpus);
  }
  if (q.compute_milli && used.compute_milli + ask.compute_milli > *q.compute_milli) {
    if (alone) {
      return p + "asks compute " + FormatShareMilli(ask.compute_milli) + ", over its quota of " +
             FormatShareMilli(*q.compute_milli);
    }
    return p + "compute " + FormatShareMilli(used.compute_milli) + " of " +
           FormatShareMilli(*q.compute_milli) + " in use, asks " +
           FormatShareMilli(ask.compute_milli);
  }
  return std::nullopt;
}

}  // namespace

std::string_view PrincipalKindName(PrincipalKind kind) {
  return kind == PrincipalKind::kUser ? "user" : "group";
}

Result<PrincipalKind> ParsePrincipalKind(std::string_view text) {
  if (text == "user") return PrincipalKind::kUser;
  if (text == "group") return PrincipalKind::kGroup;
  return InvalidArgumentError("bad principal kind " + Quote(text) + ": expected user or group");
}

std::string Principal::ToString() const {
  return std::string(PrincipalKindName(kind)) + " " + name;
}

std::string Quota::Describe() const {
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : ", ") + s; };
  if (memory_bytes) add("memory " + FormatBytes(*memory_bytes));
  if (gpus) add("gpus " + std::to_string(*gpus));
  if (compute_milli) add("compute " + FormatShareMilli(*compute_milli));
  if (jobs) add("jobs " + std::to_string(*jobs));
  return out.empty() ? "no limit" : out;
}

Result<Quota> BuildQuota(const QuotaFields& f) {
  Quota q;
  if (f.mem) {
    auto b = ParseMemorySize(*f.mem);
    if (!b.ok()) return b.status().WithContext("--mem");
    q.memory_bytes = *b;
  }
  if (f.gpus) {
    GPUSLICE_ASSIGN_OR_RETURN(q.gpus, ParseCount("--gpus", *f.gpus));
  }
  if (f.compute) {
    GPUSLICE_ASSIGN_OR_RETURN(q.compute_milli, ParseComputeTotal(*f.compute));
  }
  if (f.jobs) {
    GPUSLICE_ASSIGN_OR_RETURN(q.jobs, ParseCount("--jobs", *f.jobs));
  }
  if (q.empty()) {
    return InvalidArgumentError("a quota needs at least one of --mem, --gpus, --compute, --jobs");
  }
  return q;
}

QuotaCharge& QuotaCharge::operator+=(const QuotaCharge& o) {
  memory_bytes += o.memory_bytes;
  gpus += o.gpus;
  compute_milli += o.compute_milli;
  jobs += o.jobs;
  return *this;
}

QuotaCharge ChargeOfAllocation(const ResourceRequest& r, const Allocation& a) {
  QuotaCharge c;
  c.jobs = 1;
  uint32_t n = static_cast<uint32_t>(a.gpu_indices.size());
  c.memory_bytes = a.memory_bytes_per_gpu * n;
  switch (r.kind) {
    case RequestKind::kWholeGpus:
      c.gpus = n;
      c.compute_milli = 1000 * n;
      break;
    case RequestKind::kFraction:
      c.compute_milli = r.compute_milli;
      break;
    case RequestKind::kMig:
      c.compute_milli = r.mig.compute_slices * 1000 / 7;
      break;
  }
  return c;
}

QuotaCharge ChargeOfRequest(const ResourceRequest& r, uint64_t whole_gpu_memory) {
  QuotaCharge c;
  c.jobs = 1;
  switch (r.kind) {
    case RequestKind::kWholeGpus:
      c.gpus = r.gpus_min;
      c.memory_bytes = whole_gpu_memory * r.gpus_min;
      c.compute_milli = 1000 * r.gpus_min;
      break;
    case RequestKind::kFraction:
      c.memory_bytes = r.memory_bytes;
      c.compute_milli = r.compute_milli;
      break;
    case RequestKind::kMig:
      c.memory_bytes = uint64_t{r.mig.memory_gb} * 1'000'000'000ull;
      c.compute_milli = r.mig.compute_slices * 1000 / 7;
      break;
  }
  return c;
}

bool QuotaOwner::IsCharged(const Principal& p) const {
  if (p.kind == PrincipalKind::kUser) return p.name == user;
  for (const std::string& g : groups) {
    if (g == p.name) return true;
  }
  return false;
}

std::string_view QuotaVerdictName(QuotaVerdict verdict) {
  switch (verdict) {
    case QuotaVerdict::kFits:
      return "fits";
    case QuotaVerdict::kWaits:
      return "waits";
    case QuotaVerdict::kNever:
      return "never";
  }
  return "fits";
}

QuotaDecision DecideQuota(const QuotaCharge& ask, const std::vector<AppliedQuota>& applied) {
  for (const AppliedQuota& a : applied) {
    if (auto why = Exceeds(a.who, a.quota, QuotaCharge{}, ask, /*alone=*/true)) {
      return {QuotaVerdict::kNever, *why, a.who};
    }
  }
  for (const AppliedQuota& a : applied) {
    if (auto why = Exceeds(a.who, a.quota, a.in_use, ask, /*alone=*/false)) {
      return {QuotaVerdict::kWaits, *why, a.who};
    }
  }
  return {};
}

void QuotaBook::Set(const Principal& who, const Quota& quota) { quotas_[who] = quota; }

bool QuotaBook::Remove(const Principal& who) { return quotas_.erase(who) > 0; }

const Quota* QuotaBook::Find(const Principal& who) const {
  auto it = quotas_.find(who);
  return it == quotas_.end() ? nullptr : &it->second;
}

void QuotaBook::AddCharge(const QuotaOwner& owner, const QuotaCharge& charge,
                          QuotaUsage* usage) const {
  if (quotas_.empty()) return;
  auto add = [&](const Principal& p) {
    if (quotas_.count(p)) (*usage)[p] += charge;
  };
  add({PrincipalKind::kUser, owner.user});
  for (const std::string& g : owner.groups) add({PrincipalKind::kGroup, g});
}

std::vector<AppliedQuota> QuotaBook::Applicable(const QuotaOwner& owner,
                                                const QuotaUsage& usage) const {
  std::vector<AppliedQuota> out;
  for (const auto& [who, quota] : quotas_) {
    if (!owner.IsCharged(who)) continue;
    auto u = usage.find(who);
    out.push_back({who, quota, u == usage.end() ? QuotaCharge{} : u->second});
  }
  // The user's own quota first: it is the one a user can act on.
  std::stable_partition(out.begin(), out.end(),
                        [](const AppliedQuota& a) { return a.who.kind == PrincipalKind::kUser; });
  return out;
}

QuotaDecision QuotaBook::Decide(const QuotaOwner& owner, const QuotaCharge& ask,
                                const QuotaUsage& usage) const {
  if (quotas_.empty()) return {};
  return DecideQuota(ask, Applicable(owner, usage));
}

QuotaUsage QuotaBook::UsageWithBorrowers(const std::vector<RunningCharge>& running,
                                         const std::set<uint64_t>& borrowers) const {
  QuotaUsage usage;
  for (const RunningCharge& r : running) {
    if (!borrowers.count(r.id)) {
      AddCharge(r.owner, r.charge, &usage);
      continue;
    }
    QuotaOwner user_only{r.owner.user, {}};
    AddCharge(user_only, r.charge, &usage);
  }
  return usage;
}

QuotaDecision QuotaBook::DecideBorrowing(const QuotaOwner& owner, const QuotaCharge& ask,
                                         const QuotaUsage& usage, bool* borrows,
                                         std::string* why) const {
  *borrows = false;
  why->clear();
  if (quotas_.empty()) return {};
  std::vector<AppliedQuota> users, groups;
  for (AppliedQuota& a : Applicable(owner, usage)) {
    (a.who.kind == PrincipalKind::kUser ? users : groups).push_back(std::move(a));
  }
  QuotaDecision d = DecideQuota(ask, users);
  if (d.verdict != QuotaVerdict::kFits) return d;
  QuotaDecision g = DecideQuota(ask, groups);
  if (g.verdict != QuotaVerdict::kFits) {
    *borrows = true;
    *why = g.reason;
  }
  return {};
}

std::set<uint64_t> Borrowers(const QuotaBook& book, std::vector<RunningCharge> running) {
  std::set<uint64_t> out;
  std::sort(running.begin(), running.end(), [](const RunningCharge& a, const RunningCharge& b) {
    return a.started_ms != b.started_ms ? a.started_ms < b.started_ms : a.id < b.id;
  });
  for (const auto& [who, quota] : book.all()) {
    if (who.kind != PrincipalKind::kGroup) continue;
    QuotaCharge used;
    for (const RunningCharge& r : running) {
      if (!r.owner.IsCharged(who)) continue;
      if (Exceeds(who, quota, used, r.charge, /*alone=*/false)) {
        out.insert(r.id);
        continue;
      }
      used += r.charge;
    }
  }
  return out;
}

}  // namespace gpuslice::core
