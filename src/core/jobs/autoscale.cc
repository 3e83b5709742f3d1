#include "core/jobs/autoscale.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>

#include "core/units.h"

namespace gpuslice::core {

namespace {

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

bool ParseCount(std::string_view s, uint32_t* out) {
  if (s.empty() || s.size() > 9) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string Pct(double pct) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", pct);
  return buf;
}

std::string Dur(int64_t ms) { return FormatDuration(std::chrono::milliseconds(ms)); }

void ResetWindows(AutoscaleState& state) {
  state.above_since_ms.reset();
  state.below_since_ms.reset();
}

}  // namespace

Result<ReplicaRange> ParseReplicaRange(std::string_view text) {
  std::string_view t = text;
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  ReplicaRange r;
  size_t dash = t.find('-');
  bool ok;
  if (dash == std::string_view::npos) {
    ok = ParseCount(t, &r.min);
    r.max = r.min;
  } else {
    ok = ParseCount(t.substr(0, dash), &r.min) && ParseCount(t.substr(dash + 1), &r.max);
  }
  if (!ok) {
    return InvalidArgumentError("--replicas: bad range " + Quote(text) +
                                ": expected a count (3) or MIN-MAX (1-4)");
  }
  if (r.min < 1) {
    return InvalidArgumentError("--replicas: " + Quote(text) +
                                ": a service keeps at least 1 replica (use `service rm` to stop "
                                "it)");
  }
  if (r.min > r.max) {
    return InvalidArgumentError("--replicas: " + Quote(text) + ": minimum above maximum");
  }
  if (r.max > kMaxReplicas) {
    return InvalidArgumentError("--replicas: " + Quote(text) + ": at most " +
                                std::to_string(kMaxReplicas) + " replicas");
  }
  return r;
}

std::string FormatReplicaRange(const ReplicaRange& range) {
  if (range.min == range.max) return std::to_string(range.min);
  return std::to_string(range.min) + "-" + std::to_string(range.max);
}

Status AutoscalePolicy::Validate() const {
  if (replicas.min < 1 || replicas.min > replicas.max || replicas.max > kMaxReplicas) {
    return InvalidArgumentError("--replicas: bad range " + FormatReplicaRange(replicas));
  }
  if (target_milli < 1 || target_milli > 1000) {
    return InvalidArgumentError("--target-util: must be in (0%, 100%], got " +
                                FormatShareMilli(target_milli));
  }
  struct {
    const char* flag;
    int64_t ms;
  } durations[] = {{"--scale-up-after", scale_up_after_ms},
                   {"--scale-down-after", scale_down_after_ms},
                   {"--cooldown", cooldown_ms},
                   {"healthy run time", healthy_run_ms},
                   {"restart backoff", backoff_initial_ms},
                   {"maximum restart backoff", backoff_max_ms}};
  for (const auto& d : durations) {
    if (d.ms < 0 || d.ms > int64_t{30} * 24 * 3600 * 1000) {
      return InvalidArgumentError(std::string(d.flag) + ": must be between 0 and 30d, got " +
                                  std::to_string(d.ms) + " ms");
    }
  }
  if (backoff_max_ms < backoff_initial_ms) {
    return InvalidArgumentError("maximum restart backoff below the initial one");
  }
  if (crash_loop_after < 1) return InvalidArgumentError("crash loop threshold must be at least 1");
  return Status::Ok();
}

double ScaleDownBelowPct(const AutoscalePolicy& policy, uint32_t running) {
  if (running == 0) return 0;
  return policy.target_milli / 10.0 * (running - 1) / running;
}

ScaleDecision DecideScale(const AutoscalePolicy& policy, AutoscaleState& state,
                          const ServiceObservation& obs) {
  ScaleDecision d;
  d.desired = state.desired;
  bool steady = obs.pending == 0 && obs.stopping == 0 && obs.running == state.desired;
  if (!steady || !obs.mean_use_pct) {
    ResetWindows(state);
    return d;
  }
  const double mean = *obs.mean_use_pct;
  const double target = policy.target_milli / 10.0;
  const double down_below = ScaleDownBelowPct(policy, obs.running);
  if (mean > target) {
    if (!state.above_since_ms) state.above_since_ms = obs.now_ms;
    state.below_since_ms.reset();
  } else if (mean < down_below) {
    if (!state.below_since_ms) state.below_since_ms = obs.now_ms;
    state.above_since_ms.reset();
  } else {
    ResetWindows(state);
  }
  bool cooled = !state.last_change_ms || obs.now_ms - *state.last_change_ms >= policy.cooldown_ms;
  if (!cooled) return d;

  if (state.above_since_ms && state.desired < policy.replicas.max &&
      obs.now_ms - *state.above_since_ms >= policy.scale_up_after_ms) {
    d.action = ScaleAction::kUp;
    d.desired = state.desired + 1;
    d.reason = "mean use " + Pct(mean) + " above target " + FormatShareMilli(policy.target_milli) +
               " for " + Dur(obs.now_ms - *state.above_since_ms) + ": " +
               std::to_string(state.desired) + " -> " + std::to_string(d.desired) + " replicas";
  } else if (state.below_since_ms && state.desired > policy.replicas.min && obs.running >= 2 &&
             obs.now_ms - *state.below_since_ms >= policy.scale_down_after_ms) {
    d.action = ScaleAction::kDown;
    d.desired = state.desired - 1;
    d.reason = "mean use " + Pct(mean) + " below " + Pct(down_below) + " (target " +
               FormatShareMilli(policy.target_milli) + " x " + std::to_string(obs.running - 1) +
               "/" + std::to_string(obs.running) + ") for " +
               Dur(obs.now_ms - *state.below_since_ms) + ": " + std::to_string(state.desired) +
               " -> " + std::to_string(d.desired) + " replicas";
  } else {
    return d;
  }
  state.desired = d.desired;
  state.last_change_ms = obs.now_ms;
  ResetWindows(state);
  return d;
}

Status SetDesired(const AutoscalePolicy& policy, AutoscaleState& state, uint32_t desired,
                  int64_t now_ms) {
  if (desired < policy.replicas.min || desired > policy.replicas.max) {
    return OutOfRangeError("replicas: " + std::to_string(desired) + " is outside the range " +
                           FormatReplicaRange(policy.replicas) +
                           " (change the range with --replicas MIN-MAX)");
  }
  state.desired = desired;
  state.last_change_ms = now_ms;
  ResetWindows(state);
  return Status::Ok();
}

void ApplyRange(AutoscalePolicy& policy, AutoscaleState& state, ReplicaRange range,
                int64_t now_ms) {
  policy.replicas = range;
  uint32_t clamped = std::clamp(state.desired, range.min, range.max);
  if (clamped != state.desired) {
    state.desired = clamped;
    state.last_change_ms = now_ms;
    ResetWindows(state);
  }
}

double SliceUsePct(double gpu_util_pct, uint32_t compute_milli) {
  double pct = gpu_util_pct;
  if (compute_milli > 0) pct = gpu_util_pct * 1000.0 / compute_milli;
  return std::clamp(pct, 0.0, 100.0);
}

RestartDecision OnReplicaEnded(const AutoscalePolicy& policy, AutoscaleState& state,
                               const ReplicaEnd& end, int64_t now_ms) {
  RestartDecision r;
  r.replace_at_ms = now_ms;
  if (end.stopped_by_service) return r;
  if (end.ran_ms >= policy.healthy_run_ms) {
    // It served a while: a fresh start, replaced at once.
    state.consecutive_failures = 0;
    state.crash_loop = false;
    state.restart_not_before_ms = now_ms;
    return r;
  }
  r.failure = true;
  ++state.consecutive_failures;
  int64_t delay = policy.backoff_initial_ms;
  for (uint32_t i = 1; i < state.consecutive_failures && delay < policy.backoff_max_ms; ++i) {
    delay *= 2;
  }
  delay = std::min(delay, policy.backoff_max_ms);
  state.restart_not_before_ms = std::max(state.restart_not_before_ms, now_ms + delay);
  r.replace_at_ms = state.restart_not_before_ms;
  if (!state.crash_loop && state.consecutive_failures >= policy.crash_loop_after) {
    state.crash_loop = true;
    r.entered_crash_loop = true;
  }
  return r;
}

bool OnReplicaRunning(const AutoscalePolicy& policy, AutoscaleState& state, int64_t run_ms) {
  if (run_ms < policy.healthy_run_ms) return false;
  bool was = state.crash_loop;
  state.consecutive_failures = 0;
  state.crash_loop = false;
  return was;
}

uint32_t ReplicasToStart(const AutoscaleState& state, uint32_t live, int64_t now_ms) {
  if (live >= state.desired || now_ms < state.restart_not_before_ms) return 0;
  return state.desired - live;
}

std::optional<uint64_t> ChooseReplicaToStop(const std::vector<ReplicaInfo>& replicas) {
  const ReplicaInfo* best = nullptr;
  for (const ReplicaInfo& r : replicas) {
    if (best == nullptr) {
      best = &r;
      continue;
    }
    // Pending before running; then the newest; ties by the higher id.
    if (r.running != best->running) {
      if (!r.running) best = &r;
      continue;
    }
    if (r.since_ms > best->since_ms || (r.since_ms == best->since_ms && r.id > best->id)) best = &r;
  }
  if (best == nullptr) return std::nullopt;
  return best->id;
}

}  // namespace gpuslice::core
