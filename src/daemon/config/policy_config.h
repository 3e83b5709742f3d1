#pragma once

// The daemon's policy settings (docs/CONFIG.md, "Policies"): pools,
// preemption, the enforcement watchdog, idle reclaim and elastic jobs. Read
// from the configuration file by config.cc, carried into the Service by
// ServiceOptions::rules. Quotas are not here: admins set them at run time
// (`gpuslice quota`) and the ledger keeps them.

#include <signal.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/schedule/fair_share.h"
#include "core/schedule/preemption.h"
#include "core/schedule/runtime_estimate.h"
#include "core/status.h"
#include "daemon/config/access.h"

namespace gpuslice::daemon {

// `pool.NAME = 0,1` or `pool.NAME = GPU-uuid,...`.
struct PoolSpec {
  std::string name;
  std::vector<std::string> gpus;  // Indices or UUIDs, as written; resolved at start.
};

// What the watchdog does with a job over its limit (docs/DAEMON.md,
// "Enforcement watchdog"): `stop` freezes the job until it is back under.
enum class WatchdogAction { kOff, kReport, kStop, kKill };
// `suspend`: checkpoint the job's GPU state to host memory (docs/SUSPEND.md);
// a job that cannot be suspended gets `idle_suspend_fallback` instead.
enum class IdleAction { kWarn, kPause, kEnd, kSuspend };
// GPU processes that belong to no job: always charged in placement and
// reported. `protect` ends those that take memory jobs were promised on
// their GPU (the default), `kill` ends them all; both spare root's, the
// admin group's and an allowed group's.
enum class ForeignAction { kReport, kProtect, kKill };
// Automatic defragmentation: `auto` moves running single-GPU
// jobs (suspend, resume elsewhere) when that lets the job first in line
// start; `suggest` only says which moves would (`gpuslice ps`); `off`.
enum class DefragMode { kOff, kSuggest, kAuto };
std::string_view DefragModeName(DefragMode m);
std::string_view WatchdogActionName(WatchdogAction a);
std::string_view IdleActionName(IdleAction a);
std::string_view ForeignActionName(ForeignAction a);

struct PolicyConfig {
  std::vector<PoolSpec> pools;
  // Requests without --pool go here; GPUs no pool names belong to it.
  std::string default_pool = "default";

  core::PreemptionPolicy preemption;     // never
  int64_t preemption_grace_ms = 30'000;  // SIGTERM, then SIGKILL after this.
  // Preempt by suspending the victim (its GPU state to host memory, resumed
  // once it fits again) where the driver can; ended as before otherwise.
  bool preempt_by_suspend = true;

  // Memory: NVML's per-process memory against the daemon's own limit. Kill
  // by default: only a process that escaped the shim can get there, and
  // while it holds the memory another slice's allocations fail.
  WatchdogAction watchdog = WatchdogAction::kKill;
  // NVML counts driver memory the shim charges only after the fact: a job
  // may hold one context per process the shim registered over its limit
  // (memory_allowance.h), of this size; nullopt (`auto`, the default): the
  // size learnt from NVML (ContextSizes).
  std::optional<uint64_t> watchdog_allowance_bytes;
  // At most this much over its limit, per job and GPU, however many
  // processes its slice names (the job writes that list).
  uint64_t watchdog_allowance_max_bytes = 2ull << 30;
  // Compute: a slice with a hard share whose processes' SM use, averaged
  // over the window, stays above its share by more than the margin
  // (percentage points of the GPU). off, report or kill. Kill by default:
  // use that far over a share for a whole window came without turns (a
  // process that bypasses the shim), and it takes its neighbours' time.
  WatchdogAction watchdog_compute = WatchdogAction::kKill;
  int64_t watchdog_compute_window_ms = 2'000;
  double watchdog_compute_margin_pct = 25.0;

  // Protect by default: a process nobody placed that takes memory promised
  // to a job makes that job fail inside its own limit.
  ForeignAction foreign = ForeignAction::kProtect;
  // Groups whose foreign GPU processes `foreign = protect` and `kill` spare
  // (root's and the admin group's are always spared).
  std::vector<std::string> foreign_allowed_groups;

  double idle_threshold_pct = 30.0;  // GPU use under this counts as idle.
  int64_t idle_after_ms = 0;         // 0: idle reclaim off.
  IdleAction idle_action = IdleAction::kWarn;
  bool idle_action_always = false;  // Act even when nothing waits.
  // What idle_action = suspend does to a job that cannot be suspended.
  IdleAction idle_suspend_fallback = IdleAction::kPause;

  // Whether a suspended job's slice still counts against its owner's quotas
  // (it holds no GPU, but will take its slice back when resumed).
  bool suspended_counts_in_quota = false;
  // Resume on demand (docs/SUSPEND.md): a suspended job one of whose
  // processes makes a CUDA call is resumed, in queue order, when it fits.
  // Off: it stays suspended until resumed by hand (or, a preemption victim,
  // by the daemon once it fits).
  bool resume_on_demand = true;

  // Elastic jobs: the signal that tells one its GPU set changed, and the
  // least time between two changes of one job (rescaling restarts workers).
  int elastic_signal = SIGUSR1;
  int64_t elastic_cooldown_ms = 30'000;
  // Who may use which pool, and the priority each may ask (access.h).
  AccessConfig access;

  // Scheduling a team can trust (docs/DAEMON.md, "Placement and
  // the queue"). Run-time estimates for jobs without --max-runtime, so the
  // head of the queue gets a reservation backfill respects.
  core::RuntimeEstimates runtime_estimates;
  // Fair share (decayed usage per user and group) and aging in the queue
  // order.
  core::FairShareConfig fair_share;
  DefragMode defragment = DefragMode::kAuto;
  // Jobs moved for one waiting job, at most; and moves of one job per hour.
  uint32_t defragment_max_moves = 2;
  uint32_t defragment_moves_per_hour = 2;
  // A group's quota is a guarantee: jobs that can give capacity back
  // (restartable or suspendable) may borrow idle capacity beyond it, and
  // are suspended (else requeued) when the group's own jobs need it.
  bool quota_borrowing = true;
  // Idle reclaim leaves jobs of this priority and above alone (none: no
  // priority is exempt); `--no-idle-reclaim` exempts one job.
  std::optional<core::Priority> idle_exempt_priority = core::Priority::kHigh;
};

// Applies one `key = value` if `key` is a policy setting; *known = false
// (and Ok) when it is not. Errors name the key and the value.
core::Status ApplyPolicyValue(PolicyConfig* config, std::string_view key, std::string_view value,
                              bool* known);

}  // namespace gpuslice::daemon
