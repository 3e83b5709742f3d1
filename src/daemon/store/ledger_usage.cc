// Ledger: the rows accounting reads (docs/ACCOUNTING.md): allocations
// overlapping a window, and the time jobs spent suspended in it.

#include <algorithm>
#include <set>

#include "daemon/store/ledger.h"
#include "daemon/store/sqlite_stmt.h"

namespace gpuslice::daemon {

using core::Result;
using Stmt = SqliteStmt;

Result<std::vector<UsageRow>> Ledger::UsageRows(int64_t since_ms, int64_t until_ms) {
  Stmt s(db_,
         "SELECT a.job_id, j.uid, j.gid, j.user, j.name, a.gpu_index, j.kind, a.memory_bytes,"
         " a.compute_milli, a.allocated_ms, coalesce(a.released_ms, 0), j.started_ms,"
         " j.ended_ms, j.idle_ms, coalesce(json_extract(j.labels, '$.slurm_job'), ''),"
         // Time suspended, the current suspension up to the window's end.
         " j.suspended_total_ms + CASE WHEN j.suspended_since_ms > 0"
         " THEN max(0, ?2 - j.suspended_since_ms) ELSE 0 END"
         " FROM allocations a JOIN jobs j ON j.id = a.job_id"
         " WHERE a.allocated_ms < ?2 AND (a.released_ms IS NULL OR a.released_ms > ?1)"
         " ORDER BY a.job_id, a.gpu_index");
  GPUSLICE_RETURN_IF_ERROR(s.prepared("ledger: usage rows"));
  s.Bind(1, since_ms);
  s.Bind(2, until_ms);
  std::vector<UsageRow> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    UsageRow r;
    r.job_id = static_cast<uint64_t>(s.Int(0));
    r.uid = static_cast<uint32_t>(s.Int(1));
    r.gid = static_cast<uint32_t>(s.Int(2));
    r.user = s.Text(3);
    r.name = s.Text(4);
    r.gpu_index = static_cast<uint32_t>(s.Int(5));
    r.whole_gpu = s.Text(6) == "gpus";
    r.memory_bytes = static_cast<uint64_t>(s.Int(7));
    r.compute_milli = static_cast<uint32_t>(s.Int(8));
    r.allocated_ms = s.Int(9);
    r.released_ms = s.Int(10);
    r.job_started_ms = s.Int(11);
    r.job_ended_ms = s.Int(12);
    r.job_idle_ms = s.Int(13);
    r.slurm_job = s.Text(14);
    r.job_suspended_ms = s.Int(15);
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: usage rows");
  GPUSLICE_ASSIGN_OR_RETURN(auto suspended, SuspendedInWindow(since_ms, until_ms));
  std::set<uint64_t> with_rows;
  for (UsageRow& r : out) {
    with_rows.insert(r.job_id);
    if (auto it = suspended.find(r.job_id); it != suspended.end()) {
      r.suspended_in_window_ms = it->second;
    }
  }
  // Jobs suspended through the window: no allocation row overlaps it.
  for (const auto& [job_id, ms] : suspended) {
    if (ms <= 0 || with_rows.count(job_id)) continue;
    Stmt j(db_,
           "SELECT uid, gid, user, name, started_ms, ended_ms, idle_ms,"
           " coalesce(json_extract(labels, '$.slurm_job'), ''), kind FROM jobs WHERE id = ?1");
    GPUSLICE_RETURN_IF_ERROR(j.prepared("ledger: suspended job"));
    j.Bind(1, static_cast<int64_t>(job_id));
    if ((rc = j.Step()) != SQLITE_ROW) {
      if (rc == SQLITE_DONE) continue;  // Its job row is gone (history trimmed).
      return SqliteError(db_, rc, "ledger: suspended job");
    }
    UsageRow r;
    r.job_id = job_id;
    r.uid = static_cast<uint32_t>(j.Int(0));
    r.gid = static_cast<uint32_t>(j.Int(1));
    r.user = j.Text(2);
    r.name = j.Text(3);
    r.job_started_ms = j.Int(4);
    r.job_ended_ms = j.Int(5);
    r.job_idle_ms = j.Int(6);
    r.slurm_job = j.Text(7);
    r.whole_gpu = j.Text(8) == "gpus";
    r.suspended_in_window_ms = ms;
    r.suspension_only = true;
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::map<uint64_t, int64_t>> Ledger::SuspendedInWindow(int64_t since_ms, int64_t until_ms) {
  Stmt s(db_,
         "SELECT job_id, from_state, to_state, at_ms FROM transitions WHERE job_id IN"
         " (SELECT job_id FROM transitions WHERE to_state = 'suspended' AND at_ms < ?1)"
         " ORDER BY job_id, at_ms, rowid");
  GPUSLICE_RETURN_IF_ERROR(s.prepared("ledger: suspensions"));
  s.Bind(1, until_ms);
  std::map<uint64_t, int64_t> out;
  uint64_t job = 0;
  int64_t open_at = -1;  // When the job's current suspension began; -1: none.
  auto close = [&](int64_t at) {
    const int64_t from = std::max(open_at, since_ms), to = std::min(at, until_ms);
    if (to > from) out[job] += to - from;
    open_at = -1;
  };
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    const uint64_t id = static_cast<uint64_t>(s.Int(0));
    if (id != job) {
      if (open_at >= 0) close(until_ms);  // Still suspended.
      job = id;
      out.emplace(job, 0);
    }
    const int64_t at = s.Int(3);
    if (s.Text(1) == "suspended" && open_at >= 0) close(at);
    if (s.Text(2) == "suspended") open_at = at;
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: suspensions");
  if (open_at >= 0) close(until_ms);
  return out;
}

}  // namespace gpuslice::daemon
