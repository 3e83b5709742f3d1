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
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/jobs/job.h"
#include "core/schedule/quota.h"
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

// A decision or happening worth telling a user about: a job submitted,
// started or ended, a quota wait, a preemption, a resize, an idle action...
struct Event {
  uint64_t id = 0;
  int64_t at_ms = 0;
  std::string kind;     // e.g. "submitted", "started", "finished", "preempted"
  uint64_t job_id = 0;  // 0: not about one job.
  std::string user;     // Whose job (or who acted); "" when neither.
  std::string message;
};

struct EventQuery {
  int64_t since_ms = 0;  // Events at or after this time.
  uint64_t job_id = 0;   // 0: all jobs.
  size_t limit = 100;    // The newest `limit` of those, returned oldest first.
};

// One allocation row joined with its job, for accounting: what a job held on
// one GPU and from when to when.
struct UsageRow {
  uint64_t job_id = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string user;
  std::string name;
  std::string slurm_job;  // Its `slurm_job` label; "" when it has none.
  uint32_t gpu_index = 0;
  bool whole_gpu = false;      // The job asked for whole GPUs.
  uint64_t memory_bytes = 0;   // Its limit on this GPU.
  uint32_t compute_milli = 0;  // Its share of this GPU (0: uncapped).
  int64_t allocated_ms = 0;
  int64_t released_ms = 0;     // 0: still held.
  int64_t job_started_ms = 0;
  int64_t job_ended_ms = 0;    // 0: still running.
  int64_t job_idle_ms = 0;     // The job's idle time so far (jobs.idle_ms).
  int64_t job_suspended_ms = 0;  // Its time suspended up to the window's end.
  // Its time suspended inside the window, from its transitions (-1: never
  // suspended); and whether this row holds no allocation: the job held no
  // GPU in the window and is reported for its time suspended alone.
  int64_t suspended_in_window_ms = -1;
  bool suspension_only = false;
};

class Ledger {
 public:
  // Opens (creating if absent) and migrates the ledger at `path`. Errors when
  // the file is not a SQLite database, belongs to another application, has a
  // newer schema than this build knows, or cannot be written.
  static core::Result<std::unique_ptr<Ledger>> Open(const std::string& path);
  // Opens the ledger to read only, beside the daemon that writes it (WAL
  // lets readers in): `gpusliced --check-config`. Never creates, migrates
  // or changes a file; errors when the schema is not the one this build
  // writes.
  static core::Result<std::unique_ptr<Ledger>> OpenReadOnly(const std::string& path);
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

  // Appends an event; returns its id.
  core::Result<uint64_t> AddEvent(const Event& event);
  core::Result<std::vector<Event>> Events(const EventQuery& query);
  // Number of events of each kind ever recorded.
  core::Result<std::vector<std::pair<std::string, uint64_t>>> EventCountsByKind();
  // Allocation rows held at any time in [since_ms, until_ms).
  // The allocation rows overlapping [since, until), plus one row without an
  // allocation for each job suspended in the window that held no GPU in it.
  core::Result<std::vector<UsageRow>> UsageRows(int64_t since_ms, int64_t until_ms);
  // Per job suspended at some time in [since, until): how long, from its
  // transitions (a suspension still open runs to `until`).
  core::Result<std::map<uint64_t, int64_t>> SuspendedInWindow(int64_t since_ms, int64_t until_ms);

  // Quotas (table quotas): one row per user or group.
  core::Status SaveQuota(const core::Principal& who, const core::Quota& quota, int64_t now_ms);
  core::Status RemoveQuota(const core::Principal& who);  // kNotFound when it has none.
  core::Result<std::vector<std::pair<core::Principal, core::Quota>>> LoadQuotas();
  // A running job's new size: its row, and its held allocation rows closed
  // at `now_ms` and opened again with the new size, in one transaction.
  core::Status SaveResize(const core::Job& job, int64_t now_ms);

  // The connection, for the daemon's other ledger modules that keep their own
  // tables in this file (created by the numbered migrations here). Same
  // thread rule as the rest of the ledger.
  sqlite3* db() { return db_; }

 private:
  explicit Ledger(sqlite3* db) : db_(db) {}
  core::Status Migrate();
  // Jobs by id ascending, with their latest allocations; only_id 0: all.
  core::Result<std::vector<core::Job>> SelectJobs(bool live_only, uint64_t only_id);
  core::Status Exec(const char* sql);
  // COMMIT, rolled back when it fails, so the connection is usable again.
  core::Status Commit();
  // Rows for what a running job holds (kept if already there).
  core::Status InsertAllocations(const core::Job& job, int64_t now_ms);

  sqlite3* db_;
  int schema_version_ = 0;
};

// Makes the ledger file and its -wal, -shm and -journal (those present) mode
// 0600. Ledger::Open does it; exposed for the daemon's start and tests.
core::Status RestrictLedgerFiles(const std::string& path);

// Every sqlite result code becomes a Status here and nowhere else.
core::Status SqliteError(sqlite3* db, int rc, const std::string& what);

}  // namespace gpuslice::daemon
