// Idle reclaim (idle_reclaim.h; docs/DAEMON.md, "Idle reclaim").

#include "daemon/watch/idle_reclaim.h"

#include <chrono>

#include "core/units.h"
#include "daemon/base/log.h"

namespace gpuslice::daemon {

using core::Job;
using core::Status;

namespace {

std::string Minutes(int64_t ms) { return core::FormatDuration(std::chrono::milliseconds(ms)); }

}  // namespace

void IdleReclaim::Watch(const Job& job, const JobUsage& use, bool someone_waits) {
  const PolicyConfig& rules = rules_;
  if (rules.idle_after_ms <= 0) return;
  Episode& e = jobs_[job.id];
  if (use.low_use_ms < e.base_ms) e.base_ms = 0;  // Use came back meanwhile.
  int64_t low = use.low_use_ms - e.base_ms;
  if (low < rules.idle_after_ms) {
    if (low == 0 && !hooks_.paused(job)) e.flagged = e.acted = false;
    return;
  }
  std::string idle = "GPU use under " +
                     core::FormatShareMilli(static_cast<uint32_t>(rules.idle_threshold_pct * 10)) +
                     " for " + Minutes(low);
  const bool exempt = Exempt(job);
  if (!e.flagged) {
    e.flagged = true;
    hooks_.record(
        "idle_flagged", job,
        idle + (!exempt               ? ""
                : job.no_idle_reclaim ? "; exempt from idle reclaim (--no-idle-reclaim)"
                                      : "; exempt from idle reclaim (priority " +
                                            std::string(core::PriorityName(job.request.priority)) +
                                            ", idle_exempt_priority)"));
  }
  // An exempt job (a latency-sensitive service idle between requests) is
  // only flagged: acting on it would make its next request wait.
  if (exempt) return;
  if (e.acted || (!someone_waits && !rules.idle_action_always)) return;
  e.acted = true;
  std::string because = someone_waits ? " while jobs wait" : "";
  // An external job cannot be ended by the daemon (it runs nothing of its
  // own): "end" pauses it instead, unless it is bound to a holder whose
  // processes the daemon can end (a Slurm step).
  IdleAction action = job.mode == core::JobMode::kExternal && job.holder_pid <= 0 &&
                              rules.idle_action == IdleAction::kEnd
                          ? IdleAction::kPause
                          : rules.idle_action;
  // Only jobs whose processes the daemon started can be suspended; the
  // others get the fallback at once.
  if (action == IdleAction::kSuspend && job.mode == core::JobMode::kExternal) {
    action = rules.idle_suspend_fallback;
  }
  Act(job, action, idle + because);
}

void IdleReclaim::Act(const Job& job, IdleAction action, const std::string& idle) {
  const uint64_t id = job.id;
  switch (action) {
    case IdleAction::kWarn:
      hooks_.record("idle_action", job, "warned: " + idle);
      hooks_.tell(job, "warning: job " + std::to_string(id) + " has had " + idle +
                           "; its GPU share may be reclaimed");
      break;
    case IdleAction::kPause: {
      if (Status s = hooks_.pause(job); !s.ok()) {
        LogWarn("job " + std::to_string(id) + ": cannot pause: " + s.message());
        break;
      }
      hooks_.record(
          "idle_action", job,
          "paused (no new GPU work until `gpuslice resume " + std::to_string(id) + "`): " + idle);
      hooks_.tell(job, "job " + std::to_string(id) + " paused: " + idle +
                           "; its memory stays allocated; `gpuslice resume " + std::to_string(id) +
                           "` lets it launch again");
      break;
    }
    case IdleAction::kEnd:
      hooks_.end(job, "idle: " + idle);
      hooks_.record("idle_action", job, "ended: " + idle);
      hooks_.tell(job, "job " + std::to_string(id) + " ended: " + idle);
      break;
    case IdleAction::kSuspend:
      if (Status s = hooks_.suspend(job, idle); !s.ok()) {
        // Cannot even start (no checkpoint API, a stopped job): the fallback now.
        hooks_.record("suspend_failed", job, "idle reclaim: " + s.message());
        Act(job, rules_.idle_suspend_fallback, idle);
        break;
      }
      hooks_.record("idle_action", job, "suspending: " + idle);
      break;
  }
}

bool IdleReclaim::Exempt(const Job& job) const {
  if (job.no_idle_reclaim) return true;
  const auto& exempt = rules_.idle_exempt_priority;
  return exempt && job.request.priority >= *exempt;
}

void IdleReclaim::Unpaused(uint64_t id, const JobUsage* use) {
  Episode& e = jobs_[id];
  e.acted = e.flagged = false;
  // Idle time counts afresh from now.
  if (use != nullptr) e.base_ms = use->low_use_ms;
}

void IdleReclaim::Resumed(uint64_t id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  it->second.flagged = it->second.acted = false;
}

bool IdleReclaim::Flagged(uint64_t id) const {
  auto it = jobs_.find(id);
  return it != jobs_.end() && it->second.flagged;
}

}  // namespace gpuslice::daemon
