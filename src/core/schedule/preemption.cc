#include "core/schedule/preemption.h"

#include <algorithm>

namespace gpuslice::core {
namespace {

constexpr std::string_view kAfterPrefix = "lower-after:";

double LostGpuSeconds(const PreemptCandidate& c, int64_t now_ms) {
  return c.gpu_weight * static_cast<double>(std::max<int64_t>(0, now_ms - c.started_ms)) / 1000.0;
}

// Whether the request fits with `released` ended.
bool FitsWithout(const CapacityModel& model, uint64_t request_id,
                 const std::vector<const PreemptCandidate*>& released) {
  auto probe = model.Clone();
  for (const PreemptCandidate* c : released) probe->Release(c->id);
  return probe->TryPlace(request_id) == FitResult::kPlaced;
}

std::string IdList(const std::vector<uint64_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 8; ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  if (ids.size() > 8) out += ", ...";
  return out;
}

}  // namespace

std::string PreemptionPolicy::ToString() const {
  switch (mode) {
    case PreemptionMode::kNever:
      return "never";
    case PreemptionMode::kLower:
      return "lower";
    case PreemptionMode::kLowerAfterMinRuntime:
      return std::string(kAfterPrefix) + FormatDuration(min_runtime);
  }
  return "never";
}

Result<PreemptionPolicy> ParsePreemptionPolicy(std::string_view text) {
  PreemptionPolicy p;
  if (text == "never") return p;
  if (text == "lower") {
    p.mode = PreemptionMode::kLower;
    return p;
  }
  if (text.substr(0, kAfterPrefix.size()) == kAfterPrefix) {
    auto d = ParseDuration(text.substr(kAfterPrefix.size()));
    if (!d.ok()) return d.status().WithContext("preemption");
    p.mode = PreemptionMode::kLowerAfterMinRuntime;
    p.min_runtime = *d;
    return p;
  }
  return InvalidArgumentError("bad preemption policy '" + std::string(text) +
                              "': expected never, lower or lower-after:DURATION (e.g. "
                              "lower-after:10m)");
}

Result<PreemptionPlan> PlanPreemption(uint64_t request_id, Priority request_priority,
                                      const std::vector<PreemptCandidate>& running,
                                      const PreemptionPolicy& policy, int64_t now_ms,
                                      const CapacityModel& model) {
  if (policy.mode == PreemptionMode::kNever) {
    return FailedPreconditionError("preemption is off (preemption = never)");
  }
  std::vector<const PreemptCandidate*> eligible;
  std::vector<uint64_t> too_young;
  for (const PreemptCandidate& c : running) {
    if (c.priority >= request_priority) continue;
    if (policy.mode == PreemptionMode::kLowerAfterMinRuntime &&
        now_ms - c.started_ms < policy.min_runtime.count()) {
      too_young.push_back(c.id);
      continue;
    }
    eligible.push_back(&c);
  }
  if (eligible.empty()) {
    if (!too_young.empty()) {
      return FailedPreconditionError("the lower-priority jobs (" + IdList(too_young) +
                                     ") have run less than the minimum of " +
                                     FormatDuration(policy.min_runtime));
    }
    return FailedPreconditionError("no running job has a priority below " +
                                   std::string(PriorityName(request_priority)));
  }
  std::vector<PreemptCandidate> chosen;
  for (const PreemptCandidate* c : eligible) chosen.push_back(*c);
  auto plan = ChooseVictims(request_id, chosen, now_ms, model);
  if (!plan.ok()) {
    return FailedPreconditionError("even ending all " + std::to_string(eligible.size()) +
                                   " lower-priority job(s) would not make room");
  }
  return plan;
}

Result<PreemptionPlan> ChooseVictims(uint64_t request_id,
                                     const std::vector<PreemptCandidate>& candidates,
                                     int64_t now_ms, const CapacityModel& model) {
  std::vector<const PreemptCandidate*> eligible;
  for (const PreemptCandidate& c : candidates) eligible.push_back(&c);
  if (eligible.empty()) return FailedPreconditionError("no candidate to end");
  auto cost_less = [&](const PreemptCandidate* a, const PreemptCandidate* b) {
    if (a->priority != b->priority) return a->priority < b->priority;
    double la = LostGpuSeconds(*a, now_ms), lb = LostGpuSeconds(*b, now_ms);
    if (la != lb) return la < lb;
    if (a->restartable != b->restartable) return a->restartable;
    if (a->started_ms != b->started_ms) return a->started_ms > b->started_ms;
    return a->id < b->id;
  };
  std::sort(eligible.begin(), eligible.end(), cost_less);

  // Take the cheapest until it fits. Fitting is monotone in the set released,
  // so a binary search over the prefix length finds the shortest prefix.
  if (!FitsWithout(model, request_id, eligible)) {
    return FailedPreconditionError("even ending all " + std::to_string(eligible.size()) +
                                   " candidate(s) would not make room");
  }
  size_t lo = 1, hi = eligible.size();
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    std::vector<const PreemptCandidate*> prefix(eligible.begin(), eligible.begin() + mid);
    if (FitsWithout(model, request_id, prefix)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  std::vector<const PreemptCandidate*> victims(eligible.begin(), eligible.begin() + lo);
  // Spare every victim that is not needed, the most expensive first (a cheap
  // victim on another GPU may have been taken before the one that matters).
  for (size_t i = victims.size(); i-- > 0;) {
    if (victims.size() == 1) break;
    std::vector<const PreemptCandidate*> without = victims;
    without.erase(without.begin() + static_cast<std::ptrdiff_t>(i));
    if (FitsWithout(model, request_id, without)) victims = std::move(without);
  }
  PreemptionPlan plan;
  for (const PreemptCandidate* v : victims) {
    plan.victims.push_back(v->id);
    plan.lost_gpu_seconds += LostGpuSeconds(*v, now_ms);
  }
  return plan;
}

}  // namespace gpuslice::core
