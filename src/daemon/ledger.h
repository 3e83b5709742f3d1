#pragma once

// The daemon's ledger: every job, what it holds and each state transition,
// in SQLite (WAL). It is the truth after a crash: on restart the daemon reads
// the live jobs and their held allocations back from here, so an allocation
// is never lost nor counted twice.
//
// Schema: numbered migrations (ledger_schema.cc), the applied number in
// table schema_version, PRAGMA application_id marks the file as ours. The
// tables are documented in docs/DAEMON.md.
//
// Thread safety: none; the daemon calls it from its one event thread.

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/job.h"
#include "core/status.h"

namespace gpuslice::daemon {

// 'GPSL': PRAGMA application_id of a gpuslice ledger.
inline constexpr int32_t kLedgerApplicationId = 0x4750534c;

struct Transition {
  uint64_t job_id = 0;
  std::string from;  // "" for the first (submission) row.
  std::string to;
  int64_t at_ms = 0;
  std::string reason;
};

class Ledger {
 public:
  // Opens (creating if absent) and migrates the ledger at `path`. Errors when
  // the file is not a SQLite database, belongs to another application, has a
  // newer schema than this build knows, or cannot be written.
  static core::Result<std::unique_ptr<Ledger>> Open(const std::string& path);
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  int schema_version() const { return schema_version_; }

  // The largest job id ever stored (0 when none), so ids are never reused.
  core::Result<uint64_t> MaxJobId();

  // Inserts or updates `job` in one transaction: the job row, its held
  // allocation (rows marked released once the job is terminal) and, when
  // `from` differs from job.state, a transition row at `now_ms`.
  core::Status SaveJob(const core::Job& job, std::optional<core::JobState> from, int64_t now_ms);

  // Jobs by id ascending; live_only: queued or running ones.
  core::Result<std::vector<core::Job>> LoadJobs(bool live_only);
  core::Result<std::optional<core::Job>> LoadJob(uint64_t id);
  core::Result<std::vector<Transition>> Transitions(uint64_t job_id);
  // Held allocation rows (released_ms IS NULL) as (job id, GPU index) pairs.
  core::Result<std::vector<std::pair<uint64_t, uint32_t>>> HeldAllocations();

 private:
  explicit Ledger(sqlite3* db) : db_(db) {}
  core::Status Migrate();
  core::Status Exec(const char* sql);

  sqlite3* db_;
  int schema_version_ = 0;
};

// Every sqlite result code becomes a Status here and nowhere else.
core::Status SqliteError(sqlite3* db, int rc, const std::string& what);

}  // namespace gpuslice::daemon
