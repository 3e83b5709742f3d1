#pragma once

// Idle reclaim (docs/DAEMON.md, "Idle reclaim"): after each usage sample, a
// running job whose GPU use has stayed under `idle_threshold` for
// `idle_after` is flagged (the event "idle_flagged", the flag "idle"), and,
// while other jobs wait (or always, with `idle_action_always`), acted on
// once per episode as `idle_action` says: warned, its launches paused until
// `gpuslice resume`, ended, or suspended (`idle_suspend_fallback` when it
// cannot be). Jobs submitted with --no-idle-reclaim, and those of
// `idle_exempt_priority` or above, are only flagged.
//
// It owns each running job's idle episode (flagged, acted on, and where its
// idle time counts from since its launches were last allowed again), keyed
// by job id, and decides; what it does to a job it asks of the daemon
// through Hooks. One thread, as Service.

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/jobs/job.h"
#include "core/status.h"
#include "daemon/config/policy_config.h"
#include "daemon/usage/usage_book.h"

namespace gpuslice::daemon {

class IdleReclaim {
 public:
  // What it asks of the daemon.
  struct Hooks {
    // Whether `job`'s launches are paused now (by idle reclaim, by the
    // watchdog, or held since its submission).
    std::function<bool(const core::Job& job)> paused;
    // Pauses `job`'s launches until `gpuslice resume`; an error when its
    // slice could not be written (nothing changed).
    std::function<core::Status(const core::Job& job)> pause;
    // Ends `job` as cancelled for `reason`: SIGTERM now, SIGKILL after the
    // kill grace.
    std::function<void(const core::Job& job, const std::string& reason)> end;
    // Starts suspending `job` for idle reclaim (`idle`: why); when the
    // suspension fails later, the daemon calls Act with the fallback. An
    // error when it cannot even start.
    std::function<core::Status(const core::Job& job, const std::string& idle)> suspend;
    // Records the event `kind` about `job`.
    std::function<void(const std::string& kind, const core::Job& job, const std::string& message)>
        record;
    // Appends `line` to the job's stderr log, for `gpuslice logs`.
    std::function<void(const core::Job& job, const std::string& line)> tell;
  };

  IdleReclaim(PolicyConfig rules, Hooks hooks)
      : rules_(std::move(rules)), hooks_(std::move(hooks)) {}

  // Watches running job `job` at sample `use` (one the watchdog left
  // alone); `someone_waits`: the queue is not empty.
  void Watch(const core::Job& job, const JobUsage& use, bool someone_waits);
  // Takes `action` on `job`, idle as `idle` says ("GPU use under 30% for
  // 10m while jobs wait").
  void Act(const core::Job& job, IdleAction action, const std::string& idle);
  // Left alone by idle reclaim (--no-idle-reclaim, idle_exempt_priority).
  bool Exempt(const core::Job& job) const;

  // `job`'s launches were allowed again (`gpuslice resume`): a new episode,
  // its idle time counted afresh from `use` (null: as before).
  void Unpaused(uint64_t id, const JobUsage* use);
  // A suspended job runs again: a new episode.
  void Resumed(uint64_t id);
  // Flagged idle in its current episode (the flag "idle").
  bool Flagged(uint64_t id) const;
  // The job no longer runs (ended, or requeued): its episode goes.
  void Forget(uint64_t id) { jobs_.erase(id); }

 private:
  struct Episode {
    bool flagged = false;  // Under the idle threshold for idle_after.
    bool acted = false;    // The idle action was taken (once per episode).
    int64_t base_ms = 0;   // low_use_ms when its launches were last allowed again.
  };

  const PolicyConfig rules_;
  Hooks hooks_;
  std::unordered_map<uint64_t, Episode> jobs_;  // Running jobs, by id.
};

}  // namespace gpuslice::daemon
