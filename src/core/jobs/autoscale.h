#pragma once

// The decisions of an autoscaled service (`gpuslice service create`), the
// one-machine analogue of a Kubernetes HPA on GPU use: how many replicas it
// should have, when a replica that ended may be replaced, which replica to
// stop. Pure: every function takes the time as an argument; the daemon's
// ReplicaManager (daemon/replicas.h) feeds it observations and acts on the
// answers. docs/SERVICES.md states the rules in prose.
//
// Use of a replica is the GPU use of its slice: the SM % of its processes
// (JobUsage::gpu_util_pct) relative to its compute share when it has one, so
// a replica capped at 30% that runs flat out counts as 100% busy.
//
// Scaling (only when the service is steady: every desired replica running,
// none queued, none being stopped):
//   up    while the mean use of the running replicas stays above the target
//         for `scale_up_after_ms`, by one, up to max;
//   down  while it stays below target * (n-1)/n for `scale_down_after_ms`
//         (n running; removing one spreads the same load over n-1 replicas,
//         which then stays at or under the target), by one, down to min;
//   both  at least `cooldown_ms` after the previous change (automatic or by
//         hand). A window restarts whenever the service is not steady or
//         there is no sample, so a change is always judged on the replica
//         count it would change.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gpuslice::core {

inline constexpr uint32_t kMaxReplicas = 64;

struct ReplicaRange {
  uint32_t min = 1;
  uint32_t max = 1;
  friend bool operator==(const ReplicaRange&, const ReplicaRange&) = default;
};

// "1-4" or "3" (min == max); 1 <= min <= max <= kMaxReplicas. Errors name
// the token.
Result<ReplicaRange> ParseReplicaRange(std::string_view text);
std::string FormatReplicaRange(const ReplicaRange& range);  // "1-4", "3"

struct AutoscalePolicy {
  ReplicaRange replicas;
  uint32_t target_milli = 700;  // Target mean use of a replica's slice, per-mille.
  int64_t scale_up_after_ms = 60'000;
  int64_t scale_down_after_ms = 300'000;
  int64_t cooldown_ms = 120'000;
  // Replacing replicas that end. A replica that ran less than
  // `healthy_run_ms` (or never started) is a failure; after the k-th failure
  // in a row its replacement waits min(backoff_initial * 2^(k-1),
  // backoff_max). From `crash_loop_after` failures in a row the service is
  // in a crash loop: reported, and still retried at the backed-off pace.
  int64_t healthy_run_ms = 30'000;
  int64_t backoff_initial_ms = 5'000;
  int64_t backoff_max_ms = 300'000;
  uint32_t crash_loop_after = 3;

  // Errors name the field as the CLI spells it (--replicas, --target-util...).
  Status Validate() const;
};

// What the autoscaler remembers between observations. Not persisted: after
// a daemon restart the windows start again and a cool-down runs from the
// restart (ReplicaManager sets last_change_ms), which only delays decisions.
struct AutoscaleState {
  uint32_t desired = 1;
  std::optional<int64_t> above_since_ms;  // Start of the current run above target.
  std::optional<int64_t> below_since_ms;  // ... below the scale-down threshold.
  std::optional<int64_t> last_change_ms;  // Last change of `desired`.
  // Replacement of replicas that ended.
  uint32_t consecutive_failures = 0;
  int64_t restart_not_before_ms = 0;
  bool crash_loop = false;
};

// One observation of the service.
struct ServiceObservation {
  int64_t now_ms = 0;
  uint32_t running = 0;   // Replicas running (not being stopped).
  uint32_t pending = 0;   // Replicas queued: not capacity yet.
  uint32_t stopping = 0;  // Replicas the service is stopping.
  // Mean use (0-100) of the running replicas that have a sample; nullopt
  // when none has one yet.
  std::optional<double> mean_use_pct;
};

enum class ScaleAction { kNone, kUp, kDown };

struct ScaleDecision {
  ScaleAction action = ScaleAction::kNone;
  uint32_t desired = 0;  // After the decision.
  std::string reason;    // For the event / `service ls`; empty for kNone.
};

// Updates the windows in `state` with `obs` and decides. On kUp/kDown it sets
// state.desired and state.last_change_ms and restarts the windows.
ScaleDecision DecideScale(const AutoscalePolicy& policy, AutoscaleState& state,
                          const ServiceObservation& obs);

// The scale-down threshold for `running` replicas, in percent:
// target * (running-1) / running.
double ScaleDownBelowPct(const AutoscalePolicy& policy, uint32_t running);

// A hand-set desired count (`service scale NAME N`): must be within the
// range; counts as a change for the cool-down and restarts the windows.
Status SetDesired(const AutoscalePolicy& policy, AutoscaleState& state, uint32_t desired,
                  int64_t now_ms);

// A new range (`service scale NAME --replicas 2-6`): desired is clamped into
// it; a clamp counts as a change.
void ApplyRange(AutoscalePolicy& policy, AutoscaleState& state, ReplicaRange range, int64_t now_ms);

// Use of one replica's slice, 0-100: its GPU use relative to its compute
// share when it has one (`compute_milli` > 0), else as is; capped at 100.
double SliceUsePct(double gpu_util_pct, uint32_t compute_milli);

struct ReplicaEnd {
  int64_t ran_ms = 0;               // 0: never started (failed to launch, cancelled while queued).
  bool stopped_by_service = false;  // Scale-down or removal: not a failure.
};

struct RestartDecision {
  bool failure = false;             // It counts towards the crash loop.
  int64_t replace_at_ms = 0;        // Earliest start of its replacement.
  bool entered_crash_loop = false;  // This end made it a crash loop (report once).
};

// A replica ended on its own (or was stopped). Updates the failure count,
// the backoff and the crash-loop flag.
RestartDecision OnReplicaEnded(const AutoscalePolicy& policy, AutoscaleState& state,
                               const ReplicaEnd& end, int64_t now_ms);

// A replica has now run `run_ms` without ending: from healthy_run_ms on, the
// failures in a row are forgotten and a crash loop is over. Returns true when
// this ended a crash loop (report once).
bool OnReplicaRunning(const AutoscalePolicy& policy, AutoscaleState& state, int64_t run_ms);

// How many replicas to submit now: desired - live when positive and the
// backoff allows, else 0. `live` counts running and pending replicas that are
// not being stopped.
uint32_t ReplicasToStart(const AutoscaleState& state, uint32_t live, int64_t now_ms);

struct ReplicaInfo {
  uint64_t id = 0;
  bool running = false;  // Else pending (queued).
  int64_t since_ms = 0;  // Started (running) or submitted (pending).
};

// Which replica a scale-down stops: a pending one first (it holds nothing and
// does no work), the newest; else the newest running one (it has the least
// warmed state). nullopt for an empty list.
std::optional<uint64_t> ChooseReplicaToStop(const std::vector<ReplicaInfo>& replicas);

}  // namespace gpuslice::core
