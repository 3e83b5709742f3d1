// DegradedMode: why the daemon refuses new work, and leaving that state when
// its cause heals (degraded_mode.h).

#include "daemon/store/degraded_mode.h"

#include <chrono>

#include "core/units.h"
#include "daemon/base/log.h"

namespace gpuslice::daemon {

using core::Status;

namespace {

// How much more room than at a failed ledger write makes the next retry come
// at once instead of at its interval: someone freed space.
constexpr uint64_t kRoomReturnedBytes = 1 << 20;

constexpr char kWriteFailed[] = "ledger write failed";

}  // namespace

void DegradedMode::Degrade(const std::string& reason) {
  const bool write_failed = reason.rfind(kWriteFailed, 0) == 0;
  if (write_failed && !write_failed_) {
    // Recoverable: Maintain retries and leaves degraded mode.
    write_failed_ = true;
    write_reason_ = reason;
    failed_free_bytes_ = hooks_.free_bytes();
    failed_ms_ = hooks_.now_ms();
    retry_at_ms_ = failed_ms_ + retry_ms_;
  }
  if (reason_.empty()) {
    reason_ = reason;
    LogError("degraded: " + reason + " (serving reads, refusing new work)");
    if (write_failed) {
      hooks_.record("degraded", reason + "; refusing new work, retrying every " +
                                    core::FormatDuration(std::chrono::milliseconds(retry_ms_)));
    }
  }
}

void DegradedMode::Unsaved(uint64_t id, std::optional<core::JobState> from,
                           const std::string& why) {
  // The row in the ledger still has the state of the first unsaved change.
  unsaved_jobs_.emplace(id, from);
  Degrade(std::string(kWriteFailed) + ": " + why);
}

void DegradedMode::NoRoom(const std::string& reason) {
  if (!no_room_reason_.empty()) return;  // The first reason stands until there is room.
  no_room_reason_ = reason;
  no_room_since_ms_ = hooks_.now_ms();
  Degrade(reason);
  hooks_.record("degraded", reason + "; new jobs wait, running jobs go on");
}

void DegradedMode::RetryRoom() {
  if (no_room_reason_.empty()) return;
  if (Status room = hooks_.check_room(); !room.ok()) return;
  const std::string down =
      core::FormatDuration(std::chrono::milliseconds(hooks_.now_ms() - no_room_since_ms_));
  if (reason_ == no_room_reason_) {
    // The ledger may still fail to write: then that is the reason again.
    reason_ = write_failed_ ? write_reason_ : std::string();
  }
  no_room_reason_.clear();
  LogInfo("room for slices on the state disk again after " + down +
          (degraded() ? "" : "; accepting new work"));
  hooks_.record("recovered",
                "room for slices on the state disk again after " + down +
                    (degraded() ? "; still degraded: " + reason_ : "; accepting new work"));
  hooks_.room_again();
}

void DegradedMode::Maintain() {
  RetryRoom();
  if (!write_failed_ || !hooks_.save_job) return;
  // Every retry interval, and at once when the state disk has room again
  // (a statvfs per call while the write fails).
  if (hooks_.now_ms() < retry_at_ms_ &&
      hooks_.free_bytes() < failed_free_bytes_ + kRoomReturnedBytes) {
    return;
  }
  retry_at_ms_ = hooks_.now_ms() + retry_ms_;
  // Jobs first (they are the truth after a crash), oldest id first; stop at
  // the first failure and try again later.
  while (!unsaved_jobs_.empty()) {
    auto it = unsaved_jobs_.begin();
    if (!hooks_.save_job(it->first, it->second).ok()) return;
    unsaved_jobs_.erase(it);
  }
  if (!hooks_.write_events()) return;
  write_failed_ = false;
  write_reason_.clear();
  // Slices may still not fit: then that is the reason again.
  if (reason_.rfind(kWriteFailed, 0) == 0) reason_ = no_room_reason_;
  const std::string down =
      core::FormatDuration(std::chrono::milliseconds(hooks_.now_ms() - failed_ms_));
  LogInfo("ledger writable again after " + down + (degraded() ? "" : "; accepting new work"));
  hooks_.record("recovered",
                "ledger writable again after " + down +
                    (degraded() ? "; still degraded: " + reason_ : "; accepting new work"));
}

}  // namespace gpuslice::daemon
