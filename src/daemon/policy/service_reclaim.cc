// Service: idle reclaim and the enforcement watchdog, from the usage samples
// (service_usage.cc). See docs/DAEMON.md ("Idle reclaim", "Watchdog").

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "daemon/base/log.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Status;

namespace {

std::string Minutes(int64_t ms) { return core::FormatDuration(std::chrono::milliseconds(ms)); }

}  // namespace

void Service::AppendToStderr(const Job& job, const std::string& line) {
  // The job's own stderr log, so the user reads it with `gpuslice logs`.
  std::string path = JobDir(job.id) + "/stderr";
  int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;
  std::string text = "gpuslice: " + line + "\n";
  (void)!write(fd, text.data(), text.size());
  close(fd);
}

void Service::Reclaim() {
  const PolicyConfig& rules = options_.rules;
  bool someone_waits = !queue_.empty();
  std::vector<uint64_t> ids;
  for (const auto& [id, l] : live_) ids.push_back(id);
  for (uint64_t id : ids) {
    const JobUsage* u = usage_.Find(id);
    if (u == nullptr || u->sampled_ms == 0) continue;
    Job& job = jobs_[id];
    Live& l = live_[id];
    if (l.ending) {
      // A stopped job being ended must run to take its SIGTERM.
      watchdog_.LetEnd(job);
      continue;
    }
    const JobUsage& use = *u;
    if (job.state == JobState::kSuspended) {
      suspender_.WatchSuspended(job, use);
      continue;  // Holds no GPU: neither idle nor over any limit.
    }
    if (suspender_.Busy(id)) continue;  // Being suspended: its processes are locked.

    // The watchdog (watch/watchdog.h).
    if (watchdog_.Watch(job, use)) continue;
    if (watchdog_.Stopped(id)) continue;  // Frozen by the watchdog, not idle.

    // Idle reclaim.
    if (rules.idle_after_ms <= 0) continue;
    if (use.low_use_ms < l.idle_base_ms) l.idle_base_ms = 0;  // Use came back meanwhile.
    int64_t low = use.low_use_ms - l.idle_base_ms;
    if (low < rules.idle_after_ms) {
      if (low == 0 && !l.paused) l.idle_flagged = l.idle_acted = false;
      continue;
    }
    std::string idle =
        "GPU use under " +
        core::FormatShareMilli(static_cast<uint32_t>(rules.idle_threshold_pct * 10)) + " for " +
        Minutes(low);
    const bool exempt = IdleExempt(job);
    if (!l.idle_flagged) {
      l.idle_flagged = true;
      RecordEvent("idle_flagged", id, job.user,
                  idle + (!exempt ? ""
                          : job.no_idle_reclaim
                              ? "; exempt from idle reclaim (--no-idle-reclaim)"
                              : "; exempt from idle reclaim (priority " +
                                    std::string(core::PriorityName(job.request.priority)) +
                                    ", idle_exempt_priority)"));
    }
    // An exempt job (a latency-sensitive service idle between requests) is
    // only flagged: acting on it would make its next request wait.
    if (exempt) continue;
    if (l.idle_acted || (!someone_waits && !rules.idle_action_always)) continue;
    l.idle_acted = true;
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
    ActOnIdle(job, l, action, idle + because);
  }
}

void Service::ActOnIdle(Job& job, Live& l, IdleAction action, const std::string& idle) {
  const uint64_t id = job.id;
  const int64_t now = clock_.NowMs();
  switch (action) {
    case IdleAction::kWarn:
      RecordEvent("idle_action", id, job.user, "warned: " + idle);
      AppendToStderr(job, "warning: job " + std::to_string(id) + " has had " + idle +
                              "; its GPU share may be reclaimed");
      break;
    case IdleAction::kPause: {
      SliceLimits limits = SliceLimitsOf(job);
      limits.launches_paused = true;
      if (Status s = regions_.Update(job.region_path, limits); !s.ok()) {
        LogWarn("job " + std::to_string(id) + ": cannot pause: " + s.message());
        break;
      }
      l.paused = true;
      RecordEvent(
          "idle_action", id, job.user,
          "paused (no new GPU work until `gpuslice resume " + std::to_string(id) + "`): " + idle);
      AppendToStderr(job, "job " + std::to_string(id) + " paused: " + idle +
                              "; its memory stays allocated; `gpuslice resume " +
                              std::to_string(id) + "` lets it launch again");
      break;
    }
    case IdleAction::kEnd:
      l.ending = JobState::kCancelled;
      l.ending_reason = "idle: " + idle;
      l.kill_at_ms = now + options_.kill_grace_ms;
      if (job.pid > 0) (void)launcher_.SignalGroup(job.pid, SIGTERM);
      if (job.holder_pid > 0) SignalHeld(job, SIGTERM);
      RecordEvent("idle_action", id, job.user, "ended: " + idle);
      AppendToStderr(job, "job " + std::to_string(id) + " ended: " + idle);
      break;
    case IdleAction::kSuspend:
      SuspendCause cause;
      cause.by = "idle reclaim";
      cause.idle_fallback = options_.rules.idle_suspend_fallback;
      cause.idle_text = idle;
      if (Status s = suspender_.Suspend(job, cause); !s.ok()) {
        // Cannot even start (no checkpoint API, a stopped job): the fallback now.
        RecordEvent("suspend_failed", id, job.user, "idle reclaim: " + s.message());
        ActOnIdle(job, l, options_.rules.idle_suspend_fallback, idle);
        break;
      }
      RecordEvent("idle_action", id, job.user, "suspending: " + idle);
      break;
  }
}

Status Service::Resume(const Caller& caller, uint64_t id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  auto l = live_.find(id);
  if (job.state == JobState::kSuspended && l != live_.end()) {
    return suspender_.Resume(job, caller.user.empty() ? std::to_string(caller.uid) : caller.user);
  }
  if (l == live_.end() || !l->second.paused) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " is not paused");
  }
  SliceLimits limits = SliceLimitsOf(job);
  limits.launches_paused = false;
  GPUSLICE_RETURN_IF_ERROR(regions_.Update(job.region_path, limits));
  l->second.paused = false;
  l->second.idle_acted = l->second.idle_flagged = false;
  // Idle time counts afresh from now.
  if (const JobUsage* u = usage_.Find(id)) l->second.idle_base_ms = u->low_use_ms;
  RecordEvent("resumed", id, job.user,
              "launches allowed again by " +
                  (caller.user.empty() ? std::to_string(caller.uid) : caller.user));
  return Status::Ok();
}

std::vector<std::string> Service::FlagsOf(uint64_t id) const {
  std::vector<std::string> flags;
  auto l = live_.find(id);
  if (l == live_.end()) return flags;
  flags = suspender_.Flags(id);
  if (l->second.idle_flagged) flags.push_back("idle");
  if (l->second.paused) flags.push_back("paused");
  watchdog_.AppendFlags(id, &flags);
  if (quotas_.borrowers().count(id)) flags.push_back("borrowing");
  if (l->second.ending && l->second.ending_reason.rfind("preempted", 0) == 0) {
    flags.push_back("preempted");
  }
  if (auto j = jobs_.find(id); j != jobs_.end() && !OutsidePoolText(j->second).empty()) {
    flags.push_back("outside_pool");
  }
  return flags;
}

std::string Service::OutsidePoolText(const core::Job& job) const {
  const std::string& pool =
      job.request.pool.empty() ? options_.rules.default_pool : job.request.pool;
  std::string moved;
  for (uint32_t g : job.allocation.gpu_indices) {
    if (PoolOf(g) == pool) continue;
    moved +=
        (moved.empty() ? "GPU " : ", GPU ") + std::to_string(g) + " is in pool '" + PoolOf(g) + "'";
  }
  if (moved.empty()) return "";
  return "outside its pool '" + pool + "' since the configuration changed: " + moved +
         "; it runs on where it is, and nothing new of pool '" + pool + "' is placed there";
}

}  // namespace gpuslice::daemon
