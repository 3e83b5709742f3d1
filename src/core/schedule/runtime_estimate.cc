#include "core/schedule/runtime_estimate.h"

#include <algorithm>

namespace gpuslice::core {
namespace {

constexpr std::string_view kKey = "default_runtime";
constexpr std::string_view kPool = "default_runtime.pool.";
constexpr std::string_view kPriority = "default_runtime.priority.";

Result<std::optional<std::chrono::milliseconds>> ParseEstimate(std::string_view key,
                                                               std::string_view value) {
  if (value == "off" || value == "none") return std::optional<std::chrono::milliseconds>();
  auto d = ParseDuration(value);
  if (!d.ok()) return d.status().WithContext(key);
  if (d->count() <= 0) {
    return InvalidArgumentError(std::string(key) + ": must be positive (or off), got '" +
                                std::string(value) + "'");
  }
  return std::optional<std::chrono::milliseconds>(*d);
}

std::string Text(const std::optional<std::chrono::milliseconds>& e) {
  return e ? FormatDuration(*e) : "off";
}

}  // namespace

Status RuntimeEstimates::Apply(std::string_view key, std::string_view value, bool* known) {
  *known = true;
  if (key == kKey) {
    GPUSLICE_ASSIGN_OR_RETURN(default_, ParseEstimate(key, value));
    return Status::Ok();
  }
  if (key.substr(0, kPool.size()) == kPool) {
    std::string_view pool = key.substr(kPool.size());
    if (pool.empty()) return InvalidArgumentError(std::string(key) + ": no pool name");
    GPUSLICE_ASSIGN_OR_RETURN(by_pool_[std::string(pool)], ParseEstimate(key, value));
    return Status::Ok();
  }
  if (key.substr(0, kPriority.size()) == kPriority) {
    auto p = ParsePriority(key.substr(kPriority.size()));
    if (!p.ok()) return p.status().WithContext(key);
    GPUSLICE_ASSIGN_OR_RETURN(by_priority_[*p], ParseEstimate(key, value));
    return Status::Ok();
  }
  *known = false;
  return Status::Ok();
}

std::optional<std::chrono::milliseconds> RuntimeEstimates::For(std::string_view pool,
                                                               Priority priority) const {
  if (auto it = by_pool_.find(pool); it != by_pool_.end() && it->second) return it->second;
  if (auto it = by_priority_.find(priority); it != by_priority_.end() && it->second) {
    return it->second;
  }
  return default_;
}

std::string RuntimeEstimates::Describe() const {
  std::string out = Text(default_);
  std::string more;
  for (const auto& [pool, e] : by_pool_) {
    more += (more.empty() ? "" : "; ") + std::string("pool ") + pool + ": " + Text(e);
  }
  for (const auto& [p, e] : by_priority_) {
    more += (more.empty() ? "" : "; ") + std::string("priority ") + std::string(PriorityName(p)) +
            ": " + Text(e);
  }
  return more.empty() ? out : out + " (" + more + ")";
}

int64_t ExpectedEndMs(int64_t now_ms, int64_t ran_ms, int64_t estimate_ms) {
  estimate_ms = std::max<int64_t>(estimate_ms, 1);
  ran_ms = std::max<int64_t>(ran_ms, 0);
  int64_t total = estimate_ms;
  // Doubling: at most 62 steps before it would overflow; a job never runs
  // that long, but a clock that jumps must not loop forever.
  for (int i = 0; i < 62 && total <= ran_ms; ++i) total *= 2;
  return now_ms + std::max<int64_t>(total - ran_ms, 1);
}

}  // namespace gpuslice::core
