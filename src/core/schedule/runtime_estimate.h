#pragma once

// Default run-time estimates (Slurm's DefaultTime, but never enforced): how
// long a job that gave no --max-runtime is expected to run, so that the job
// first in line gets a reservation time that backfill respects even when no
// one gives run times. Pure: the daemon reads the settings from its
// configuration, the queue replay from its flags.
//
// The estimate of a job is its pool's (`default_runtime.pool.NAME`), else its
// priority's (`default_runtime.priority.low|normal|high`), else the machine's
// (`default_runtime`, 1h unless set; `off` for none). A job that has run past
// its estimate is expected to run as long again: its expected end is its
// start plus the estimate doubled as often as it takes to lie in the future
// (a job that has run long is likely to run long), so the head's
// reservation is always ahead of now and moves out as the estimates prove
// short.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "core/units.h"

namespace gpuslice::core {

class RuntimeEstimates {
 public:
  // The machine's default: one hour.
  static constexpr std::chrono::milliseconds kDefault{60 * 60 * 1000};

  RuntimeEstimates() = default;

  // Applies one configuration setting: `default_runtime`,
  // `default_runtime.pool.NAME` or `default_runtime.priority.PRIORITY`, each
  // a duration ("2h", "30m") or `off` (none at that level; a level below, or
  // no estimate at all for the machine's). *known = false (and Ok) for any
  // other key. Errors name the key and the value.
  Status Apply(std::string_view key, std::string_view value, bool* known);

  // The estimate for a job of `priority` in `pool` ("" = the default pool),
  // none when every level that applies is off.
  std::optional<std::chrono::milliseconds> For(std::string_view pool, Priority priority) const;

  // "1h (pool inference: 10m; priority high: 30m)", for logs and docs.
  std::string Describe() const;

 private:
  // nullopt in a map: set to `off` at that level.
  std::optional<std::chrono::milliseconds> default_ = kDefault;
  std::map<std::string, std::optional<std::chrono::milliseconds>, std::less<>> by_pool_;
  std::map<Priority, std::optional<std::chrono::milliseconds>> by_priority_;
};

// When a job expected to run `estimate_ms` in all, which has run `ran_ms` so
// far (time suspended excluded), is expected to end: now + what is left of
// the estimate, the estimate doubled until it exceeds what it has run.
// Never before `now_ms + 1`.
int64_t ExpectedEndMs(int64_t now_ms, int64_t ran_ms, int64_t estimate_ms);

}  // namespace gpuslice::core
