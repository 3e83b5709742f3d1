#pragma once

// Degraded mode, as a component Service owns (docs/DAEMON.md, "Degraded
// mode"): why the daemon refuses new work, if it does, and what it does to
// leave that state. Two causes heal by themselves:
//   - a failed ledger write (disk full...): the jobs whose rows could not be
//     written are remembered and written again every retry interval, and at
//     once when the state disk has 1 MiB more room than at the failure;
//     once they and the events waiting for the ledger are written, the
//     daemon leaves degraded mode;
//   - no room on the state disk for a job's slice: no job starts until a
//     slice fits again, checked on each Maintain call.
// Other causes (the GPUs or the ledger unreadable at start) last until a
// restart. The first reason stands while it lasts; a healed one gives way
// to one that still holds.
//
// It owns that state; writing a job's row, the events waiting for the
// ledger, the room check and the events it records are Service's, asked
// through `Hooks`. One thread, as Service.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "core/jobs/job.h"
#include "core/status.h"

namespace gpuslice::daemon {

class DegradedMode {
 public:
  struct Hooks {
    std::function<int64_t()> now_ms;
    // Free bytes on the state disk (0 when it cannot be told).
    std::function<uint64_t()> free_bytes;
    // Writes job `id`'s row again, its last saved state being `from`; Ok
    // when the job is gone. Unset while there is no ledger.
    std::function<core::Status(uint64_t id, std::optional<core::JobState> from)> save_job;
    // Writes the events that wait for the ledger; false while it fails.
    std::function<bool()> write_events;
    // Whether a slice fits on the state disk now.
    std::function<core::Status()> check_room;
    // An event of the daemon's (kinds "degraded", "recovered").
    std::function<void(const std::string& kind, const std::string& message)> record;
    // Room for slices again: what waited for it may start.
    std::function<void()> room_again;
  };

  DegradedMode(Hooks hooks, int64_t retry_ms) : hooks_(std::move(hooks)), retry_ms_(retry_ms) {}

  bool degraded() const { return !reason_.empty(); }
  const std::string& reason() const { return reason_; }
  // No job may start: there is no room for slices.
  bool no_room() const { return !no_room_reason_.empty(); }

  // Degrades for `reason` (logged; the first reason stands). A reason that
  // starts "ledger write failed" is retried by Maintain.
  void Degrade(const std::string& reason);
  // Job `id`'s row could not be written (its ledger row still holds state
  // `from`): written again by Maintain. Degrades with `why`.
  void Unsaved(uint64_t id, std::optional<core::JobState> from, const std::string& why);
  // Job `id`'s unsaved change is dropped, not written again (a launch
  // intent undone: the ledger never saw the job leave the queue).
  void DropUnsaved(uint64_t id) { unsaved_jobs_.erase(id); }
  // A slice could not be made for lack of room on the state disk.
  void NoRoom(const std::string& reason);
  // The event loop's timer: leaves the states that healed (cheap when the
  // ledger and the disk are fine).
  void Maintain();

 private:
  void RetryRoom();

  Hooks hooks_;
  const int64_t retry_ms_;
  std::string reason_;
  // Ledger writes that failed (job id -> the state its last saved row has).
  std::map<uint64_t, std::optional<core::JobState>> unsaved_jobs_;
  bool write_failed_ = false;       // Degraded by a write, so recoverable.
  std::string write_reason_;        // Its reason while it lasts.
  uint64_t failed_free_bytes_ = 0;  // Free on the state disk when it failed.
  int64_t failed_ms_ = 0;
  int64_t retry_at_ms_ = 0;
  // No room on the state disk for a slice: why (empty: there is), and since.
  std::string no_room_reason_;
  int64_t no_room_since_ms_ = 0;
};

}  // namespace gpuslice::daemon
