#include "daemon/store/ledger.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/jobs/dependency.h"
#include "daemon/store/ledger_schema.h"
#include "daemon/store/sqlite_stmt.h"

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::Result;
using core::Status;

using Stmt = SqliteStmt;

std::string ToJson(const std::vector<std::string>& v) { return nlohmann::json(v).dump(); }

Result<std::vector<std::string>> FromJson(const std::string& text, const char* column) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) {
    return core::InternalError(std::string("ledger: column ") + column + " is not a JSON array");
  }
  std::vector<std::string> out;
  for (const auto& e : j) {
    if (!e.is_string()) {
      return core::InternalError(std::string("ledger: column ") + column + " holds a non-string");
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::string LabelsToJson(const std::map<std::string, std::string>& labels) {
  return nlohmann::json(labels).dump();
}

Result<std::map<std::string, std::string>> LabelsFromJson(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return core::InternalError("ledger: column labels is not a JSON object");
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string()) return core::InternalError("ledger: label '" + k + "' is not a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

constexpr const char* kJobColumns =
    "id, uid, gid, user, name, kind, gpus_min, gpus_max, memory_bytes, compute_milli, mig, "
    "priority, max_runtime_ms, mode, argv, cwd, env, state, submitted_ms, started_ms, ended_ms, "
    "exit_code, reason, pid, pid_start_time, region_path, idle_ms, pool, restartable, "
    "compute_mode, host_cpu_milli, host_memory_bytes, after_jobs, image, engine, labels, "
    "holder_pid, holder_start_time, suspended_since_ms, suspended_total_ms, "
    "resume_when_fits, hold, gpu_models, no_idle_reclaim";

Result<Job> ReadJob(const Stmt& s) {
  Job j;
  j.id = static_cast<uint64_t>(s.Int(0));
  j.uid = static_cast<uint32_t>(s.Int(1));
  j.gid = static_cast<uint32_t>(s.Int(2));
  j.user = s.Text(3);
  core::ResourceRequest& r = j.request;
  r.name = s.Text(4);
  std::string kind = s.Text(5);
  if (kind == "gpus") {
    r.kind = core::RequestKind::kWholeGpus;
  } else if (kind == "fraction") {
    r.kind = core::RequestKind::kFraction;
  } else if (kind == "mig") {
    r.kind = core::RequestKind::kMig;
  } else {
    return core::InternalError("ledger: job " + std::to_string(j.id) + " has unknown kind '" +
                               kind + "'");
  }
  r.gpus_min = static_cast<uint32_t>(s.Int(6));
  r.gpus_max = static_cast<uint32_t>(s.Int(7));
  r.memory_bytes = static_cast<uint64_t>(s.Int(8));
  r.compute_milli = static_cast<uint32_t>(s.Int(9));
  if (r.kind == core::RequestKind::kMig) {
    GPUSLICE_ASSIGN_OR_RETURN(r.mig, core::ParseMigProfile(s.Text(10)));
  }
  GPUSLICE_ASSIGN_OR_RETURN(r.priority, core::ParsePriority(s.Text(11)));
  if (!s.IsNull(12)) r.max_runtime = std::chrono::milliseconds(s.Int(12));
  GPUSLICE_ASSIGN_OR_RETURN(j.mode, core::ParseJobMode(s.Text(13)));
  GPUSLICE_ASSIGN_OR_RETURN(j.argv, FromJson(s.Text(14), "argv"));
  j.cwd = s.Text(15);
  GPUSLICE_ASSIGN_OR_RETURN(j.env, FromJson(s.Text(16), "env"));
  GPUSLICE_ASSIGN_OR_RETURN(j.state, core::ParseJobState(s.Text(17)));
  j.submitted_ms = s.Int(18);
  j.started_ms = s.Int(19);
  j.ended_ms = s.Int(20);
  j.exit_code = static_cast<int>(s.Int(21));
  j.reason = s.Text(22);
  j.pid = s.Int(23);
  j.pid_start_time = static_cast<uint64_t>(s.Int(24));
  j.region_path = s.Text(25);
  j.idle_ms = s.Int(26);
  r.pool = s.Text(27);
  j.restartable = s.Int(28) != 0;
  GPUSLICE_ASSIGN_OR_RETURN(r.compute_mode, core::ParseComputeMode(s.Text(29)));
  r.host_cpu_milli = static_cast<uint32_t>(s.Int(30));
  r.host_memory_bytes = static_cast<uint64_t>(s.Int(31));
  if (std::string after = s.Text(32); !after.empty()) {
    auto deps = core::ParseDependencies(after);
    if (!deps.ok()) {
      return core::InternalError("ledger: job " + std::to_string(j.id) + " has after_jobs '" +
                                 after.substr(0, 64) + "': " + deps.status().message());
    }
    j.after = std::move(*deps);
  }
  j.image = s.Text(33);
  j.engine = s.Text(34);
  GPUSLICE_ASSIGN_OR_RETURN(j.labels, LabelsFromJson(s.Text(35)));
  j.holder_pid = s.Int(36);
  j.holder_start_time = static_cast<uint64_t>(s.Int(37));
  j.suspended_since_ms = s.Int(38);
  j.suspended_total_ms = s.Int(39);
  j.resume_when_fits = s.Int(40) != 0;
  GPUSLICE_ASSIGN_OR_RETURN(j.hold, core::ParseHoldKind(s.Text(41)));
  if (std::string models = s.Text(42); !models.empty()) {
    auto parsed = core::ParseGpuModels(models);
    if (!parsed.ok()) {
      return core::InternalError("ledger: job " + std::to_string(j.id) + " has gpu_models '" +
                                 models.substr(0, 64) + "': " + parsed.status().message());
    }
    r.gpu_models = std::move(*parsed);
  }
  j.no_idle_reclaim = s.Int(43) != 0;
  return j;
}

}  // namespace

Status SqliteError(sqlite3* db, int rc, const std::string& what) {
  std::string msg = what + ": " + sqlite3_errstr(rc);
  if (db != nullptr && sqlite3_errcode(db) == rc) {
    msg += " (";
    msg += sqlite3_errmsg(db);
    msg += ")";
  }
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return core::UnavailableError(msg);
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_AUTH:
      return core::PermissionDeniedError(msg);
    case SQLITE_FULL:
      return core::ResourceExhaustedError(msg);
    case SQLITE_CANTOPEN:
    case SQLITE_NOTFOUND:
      return core::NotFoundError(msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return core::FailedPreconditionError(msg);
    default:
      return core::InternalError(msg);
  }
}

Status RestrictLedgerFiles(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    std::string file = path + suffix;
    if (chmod(file.c_str(), 0600) != 0 && errno != ENOENT) {
      return core::PermissionDeniedError("chmod 0600 " + file + ": " + strerror(errno));
    }
  }
  return Status::Ok();
}

namespace {

// Restores the process's umask when the ledger is open.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : old_(umask(mask)) {}
  ~ScopedUmask() { umask(old_); }
  ScopedUmask(const ScopedUmask&) = delete;
  ScopedUmask& operator=(const ScopedUmask&) = delete;

 private:
  mode_t old_;
};

}  // namespace

Result<std::unique_ptr<Ledger>> Ledger::Open(const std::string& path) {
  // The ledger holds every job's environment, secrets included:
  // its files are the daemon user's alone. The umask covers the files SQLite
  // creates now; SQLite gives a -wal/-shm it creates later the database
  // file's own mode; the chmod fixes files an older gpusliced left 0644.
  ScopedUmask mask(077);
  GPUSLICE_RETURN_IF_ERROR(RestrictLedgerFiles(path));
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status s = SqliteError(db, rc, "open ledger " + path);
    sqlite3_close(db);
    return s;
  }
  std::unique_ptr<Ledger> ledger(new Ledger(db));
  sqlite3_busy_timeout(db, 2000);
  // WAL: readers never block the writer, and a commit appends instead of
  // rewriting pages. synchronous=NORMAL keeps commits durable across a crash
  // of the daemon (the WAL is in the OS page cache) at a far lower cost than
  // FULL; only an OS crash may lose the last transactions.
  GPUSLICE_RETURN_IF_ERROR(ledger->Exec("PRAGMA journal_mode=WAL").WithContext(path));
  GPUSLICE_RETURN_IF_ERROR(ledger->Exec("PRAGMA synchronous=NORMAL").WithContext(path));
  GPUSLICE_RETURN_IF_ERROR(ledger->Exec("PRAGMA foreign_keys=ON").WithContext(path));
  GPUSLICE_RETURN_IF_ERROR(ledger->Migrate().WithContext(path));
  GPUSLICE_RETURN_IF_ERROR(RestrictLedgerFiles(path));
  return ledger;
}

Result<std::unique_ptr<Ledger>> Ledger::OpenReadOnly(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status s = SqliteError(db, rc, "open ledger " + path + " to read");
    sqlite3_close(db);
    return s;
  }
  std::unique_ptr<Ledger> ledger(new Ledger(db));
  sqlite3_busy_timeout(db, 2000);
  int64_t app_id = 0;
  {
    Stmt app(db, "PRAGMA application_id");
    GPUSLICE_RETURN_IF_ERROR(app.prepared("ledger: read application_id"));
    rc = app.Step();
    if (rc != SQLITE_ROW) return SqliteError(db, rc, "ledger: read application_id");
    app_id = app.Int(0);
  }
  if (app_id != kLedgerApplicationId) {
    return core::FailedPreconditionError(path + ": not a gpuslice ledger");
  }
  {
    Stmt ver(db, "SELECT version FROM schema_version");
    GPUSLICE_RETURN_IF_ERROR(ver.prepared("ledger: read schema_version"));
    rc = ver.Step();
    if (rc != SQLITE_ROW) return core::FailedPreconditionError("ledger: schema_version is empty");
    ledger->schema_version_ = static_cast<int>(ver.Int(0));
  }
  const int want = static_cast<int>(LedgerMigrations().size());
  if (ledger->schema_version_ != want) {
    return core::FailedPreconditionError(
        path + ": ledger schema " + std::to_string(ledger->schema_version_) +
        ", this gpusliced reads schema " + std::to_string(want) +
        " (check with the gpusliced that wrote it, or start this one once to migrate it)");
  }
  return ledger;
}

Ledger::~Ledger() { sqlite3_close(db_); }

Status Ledger::Exec(const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status::Ok();
  std::string what = std::string("ledger: ") + (err ? err : "exec failed");
  sqlite3_free(err);
  return SqliteError(nullptr, rc, what);
}

Status Ledger::Commit() {
  Status s = Exec("COMMIT");
  // A COMMIT that fails (disk full) leaves the transaction open; without the
  // rollback every later BEGIN would fail and the ledger would never recover
  // once space is freed.
  if (!s.ok() && sqlite3_get_autocommit(db_) == 0) (void)Exec("ROLLBACK");
  return s;
}

Status Ledger::Migrate() {
  // Each statement is finalised (end of its block) before anything writes.
  int rc;
  int64_t app_id = 0;
  {
    Stmt app(db_, "PRAGMA application_id");
    GPUSLICE_RETURN_IF_ERROR(app.prepared("ledger: read application_id"));
    rc = app.Step();
    if (rc != SQLITE_ROW) return SqliteError(db_, rc, "ledger: read application_id");
    app_id = app.Int(0);
  }
  bool fresh = false;
  {
    Stmt tables(db_, "SELECT count(*) FROM sqlite_master");
    GPUSLICE_RETURN_IF_ERROR(tables.prepared("ledger: read schema"));
    rc = tables.Step();
    if (rc != SQLITE_ROW) return SqliteError(db_, rc, "ledger: read schema");
    fresh = tables.Int(0) == 0;
  }

  if (!fresh && app_id != kLedgerApplicationId) {
    return core::FailedPreconditionError("not a gpuslice ledger (application_id " +
                                         std::to_string(app_id) + ")");
  }
  if (fresh) {
    GPUSLICE_RETURN_IF_ERROR(
        Exec(("BEGIN; PRAGMA application_id=" + std::to_string(kLedgerApplicationId) +
              "; CREATE TABLE schema_version (version INTEGER NOT NULL);"
              " INSERT INTO schema_version VALUES (0); COMMIT;")
                 .c_str()));
  }
  {
    // An open statement would keep DROP TABLE (migration 3) from running
    // ("database table is locked").
    Stmt ver(db_, "SELECT version FROM schema_version");
    GPUSLICE_RETURN_IF_ERROR(ver.prepared("ledger: read schema_version"));
    rc = ver.Step();
    if (rc != SQLITE_ROW) return core::FailedPreconditionError("ledger: schema_version is empty");
    schema_version_ = static_cast<int>(ver.Int(0));
  }

  auto migrations = LedgerMigrations();
  if (schema_version_ > static_cast<int>(migrations.size())) {
    return core::FailedPreconditionError(
        "ledger schema version " + std::to_string(schema_version_) +
        " is newer than this gpusliced knows (" + std::to_string(migrations.size()) + ")");
  }
  for (size_t n = static_cast<size_t>(schema_version_); n < migrations.size(); ++n) {
    std::string sql = std::string("BEGIN;\n") + migrations[n] +
                      "\nUPDATE schema_version SET version = " + std::to_string(n + 1) +
                      ";\nCOMMIT;";
    Status s = Exec(sql.c_str());
    if (!s.ok()) {
      (void)Exec("ROLLBACK");
      return s.WithContext("ledger migration " + std::to_string(n + 1));
    }
    schema_version_ = static_cast<int>(n + 1);
  }
  return Status::Ok();
}

Result<uint64_t> Ledger::MaxJobId() {
  Stmt s(db_, "SELECT coalesce(max(id), 0) FROM jobs");
  GPUSLICE_RETURN_IF_ERROR(s.prepared("ledger: max job id"));
  int rc = s.Step();
  if (rc != SQLITE_ROW) return SqliteError(db_, rc, "ledger: max job id");
  return static_cast<uint64_t>(s.Int(0));
}

Status Ledger::InsertAllocations(const Job& job, int64_t now_ms) {
  const core::Allocation& a = job.allocation;
  for (size_t i = 0; i < a.gpu_indices.size(); ++i) {
    // The unique index over held rows keeps one row per (job, GPU) held.
    Stmt ins(db_,
             "INSERT OR IGNORE INTO allocations (job_id, gpu_index, gpu_uuid, memory_bytes,"
             " compute_milli, allocated_ms) VALUES (?1,?2,?3,?4,?5,?6)");
    GPUSLICE_RETURN_IF_ERROR(ins.prepared("ledger: save allocation"));
    ins.Bind(1, static_cast<int64_t>(job.id));
    ins.Bind(2, int64_t{a.gpu_indices[i]});
    ins.Bind(3, i < a.gpu_uuids.size() ? a.gpu_uuids[i] : std::string());
    ins.Bind(4, static_cast<int64_t>(a.memory_bytes_per_gpu));
    ins.Bind(5, int64_t{a.compute_milli});
    ins.Bind(6, now_ms);
    int rc = ins.Step();
    if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: save allocation");
  }
  return Status::Ok();
}

Status Ledger::SaveJob(const Job& job, std::optional<core::JobState> from, int64_t now_ms) {
  GPUSLICE_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  auto body = [&]() -> Status {
    std::string sql =
        std::string("INSERT OR REPLACE INTO jobs (") + kJobColumns +
        ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,"
        "?19,?20,?21,?22,?23,?24,?25,?26,?27,?28,?29,?30,?31,?32,?33,?34,?35,?36,?37,?38,?39,"
        "?40,?41,?42,?43,?44)";
    Stmt s(db_, sql.c_str());
    GPUSLICE_RETURN_IF_ERROR(s.prepared("ledger: save job"));
    const core::ResourceRequest& r = job.request;
    s.Bind(1, static_cast<int64_t>(job.id));
    s.Bind(2, int64_t{job.uid});
    s.Bind(3, int64_t{job.gid});
    s.Bind(4, job.user);
    s.Bind(5, r.name);
    s.Bind(6, std::string(core::RequestKindName(r.kind)));
    s.Bind(7, int64_t{r.gpus_min});
    s.Bind(8, int64_t{r.gpus_max});
    s.Bind(9, static_cast<int64_t>(r.memory_bytes));
    s.Bind(10, int64_t{r.compute_milli});
    s.Bind(11, r.kind == core::RequestKind::kMig ? r.mig.ToString() : std::string());
    s.Bind(12, std::string(core::PriorityName(r.priority)));
    if (r.max_runtime) {
      s.Bind(13, static_cast<int64_t>(r.max_runtime->count()));
    } else {
      s.BindNull(13);
    }
    s.Bind(14, std::string(core::JobModeName(job.mode)));
    s.Bind(15, ToJson(job.argv));
    s.Bind(16, job.cwd);
    s.Bind(17, ToJson(job.env));
    s.Bind(18, std::string(core::JobStateName(job.state)));
    s.Bind(19, job.submitted_ms);
    s.Bind(20, job.started_ms);
    s.Bind(21, job.ended_ms);
    s.Bind(22, job.exit_code);
    s.Bind(23, job.reason);
    s.Bind(24, job.pid);
    s.Bind(25, static_cast<int64_t>(job.pid_start_time));
    s.Bind(26, job.region_path);
    s.Bind(27, job.idle_ms);
    s.Bind(28, r.pool);
    s.Bind(29, int64_t{job.restartable});
    s.Bind(30, std::string(core::ComputeModeName(r.compute_mode)));
    s.Bind(31, int64_t{r.host_cpu_milli});
    s.Bind(32, static_cast<int64_t>(r.host_memory_bytes));
    s.Bind(33, core::FormatDependencies(job.after));
    s.Bind(34, job.image);
    s.Bind(35, job.engine);
    s.Bind(36, LabelsToJson(job.labels));
    s.Bind(37, job.holder_pid);
    s.Bind(38, static_cast<int64_t>(job.holder_start_time));
    s.Bind(39, job.suspended_since_ms);
    s.Bind(40, job.suspended_total_ms);
    s.Bind(41, int64_t{job.resume_when_fits});
    s.Bind(42, std::string(core::HoldKindName(job.hold)));
    s.Bind(43, core::FormatGpuModels(r.gpu_models));
    s.Bind(44, int64_t{job.no_idle_reclaim});
    int rc = s.Step();
    if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: save job");

    // Allocation rows: inserted once while held; marked released when the job
    // is terminal. Never deleted, so the history shows where a job ran.
    if (job.state == core::JobState::kRunning) {
      GPUSLICE_RETURN_IF_ERROR(InsertAllocations(job, now_ms));
    } else if (core::IsTerminal(job.state) || from == core::JobState::kRunning) {
      // Ended, or requeued after a preemption: what it held is free.
      Stmt rel(db_,
               "UPDATE allocations SET released_ms = ?2 WHERE job_id = ?1 AND released_ms IS "
               "NULL");
      GPUSLICE_RETURN_IF_ERROR(rel.prepared("ledger: release allocation"));
      rel.Bind(1, static_cast<int64_t>(job.id));
      rel.Bind(2, now_ms);
      rc = rel.Step();
      if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: release allocation");
    }
    if (!from || *from != job.state) {
      Stmt t(db_,
             "INSERT INTO transitions (job_id, from_state, to_state, at_ms, reason)"
             " VALUES (?1,?2,?3,?4,?5)");
      GPUSLICE_RETURN_IF_ERROR(t.prepared("ledger: save transition"));
      t.Bind(1, static_cast<int64_t>(job.id));
      t.Bind(2, from ? std::string(core::JobStateName(*from)) : std::string());
      t.Bind(3, std::string(core::JobStateName(job.state)));
      t.Bind(4, now_ms);
      t.Bind(5, job.reason);
      rc = t.Step();
      if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: save transition");
    }
    return Status::Ok();
  };
  Status s = body();
  if (!s.ok()) {
    (void)Exec("ROLLBACK");
    return s;
  }
  return Commit();
}

Result<std::vector<Job>> Ledger::LoadJobs(bool live_only) { return SelectJobs(live_only, 0); }

Result<std::vector<Job>> Ledger::SelectJobs(bool live_only, uint64_t only_id) {
  std::string sql = std::string("SELECT ") + kJobColumns + " FROM jobs WHERE (?1 = 0 OR id = ?1)" +
                    (live_only ? " AND state IN ('queued', 'running', 'suspended')" : "") +
                    " ORDER BY id";
  Stmt s(db_, sql.c_str());
  GPUSLICE_RETURN_IF_ERROR(s.prepared("ledger: load jobs"));
  s.Bind(1, static_cast<int64_t>(only_id));
  std::vector<Job> jobs;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    GPUSLICE_ASSIGN_OR_RETURN(Job j, ReadJob(s));
    jobs.push_back(std::move(j));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: load jobs");
  // Allocations, attached to their jobs (held ones for live jobs, the last
  // ones for finished jobs: the history of where they ran).
  // A job may have held several stretches (requeued after a preemption,
  // resized): only its latest counts, one row per GPU (the newest).
  Stmt a(db_,
         "SELECT job_id, gpu_index, gpu_uuid, memory_bytes, compute_milli FROM allocations a"
         " WHERE (?1 = 0 OR job_id = ?1) AND allocated_ms = (SELECT max(allocated_ms)"
         " FROM allocations b WHERE b.job_id = a.job_id) ORDER BY job_id, gpu_index, id");
  GPUSLICE_RETURN_IF_ERROR(a.prepared("ledger: load allocations"));
  a.Bind(1, static_cast<int64_t>(only_id));
  size_t k = 0;
  while ((rc = a.Step()) == SQLITE_ROW) {
    uint64_t id = static_cast<uint64_t>(a.Int(0));
    while (k < jobs.size() && jobs[k].id < id) ++k;
    if (k == jobs.size()) break;
    if (jobs[k].id != id) continue;
    if (jobs[k].state == core::JobState::kQueued) continue;  // Requeued: holds nothing.
    core::Allocation& al = jobs[k].allocation;
    uint32_t gpu = static_cast<uint32_t>(a.Int(1));
    if (!al.gpu_indices.empty() && al.gpu_indices.back() == gpu) {
      al.gpu_uuids.back() = a.Text(2);  // Same GPU twice in one millisecond: the newest.
    } else {
      al.gpu_indices.push_back(gpu);
      al.gpu_uuids.push_back(a.Text(2));
    }
    al.memory_bytes_per_gpu = static_cast<uint64_t>(a.Int(3));
    al.compute_milli = static_cast<uint32_t>(a.Int(4));
  }
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
    return SqliteError(db_, rc, "ledger: load allocations");
  }
  return jobs;
}

Result<std::optional<Job>> Ledger::LoadJob(uint64_t id) {
  if (id == 0) return std::optional<Job>();
  // By its primary key (a submission --after an old job asks for one).
  GPUSLICE_ASSIGN_OR_RETURN(std::vector<Job> one, SelectJobs(false, id));
  if (one.empty()) return std::optional<Job>();
  return std::optional<Job>(std::move(one.front()));
}

Result<std::vector<Transition>> Ledger::Transitions(uint64_t job_id) {
  Stmt s(db_,
         "SELECT job_id, from_state, to_state, at_ms, reason FROM transitions WHERE job_id = ?1"
         " ORDER BY rowid");
  GPUSLICE_RETURN_IF_ERROR(s.prepared("ledger: load transitions"));
  s.Bind(1, static_cast<int64_t>(job_id));
  std::vector<Transition> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    out.push_back({static_cast<uint64_t>(s.Int(0)), s.Text(1), s.Text(2), s.Int(3), s.Text(4)});
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: load transitions");
  return out;
}

Result<std::vector<std::pair<uint64_t, uint32_t>>> Ledger::HeldAllocations() {
  Stmt s(db_,
         "SELECT job_id, gpu_index FROM allocations WHERE released_ms IS NULL ORDER BY job_id,"
         " gpu_index");
  GPUSLICE_RETURN_IF_ERROR(s.prepared("ledger: held allocations"));
  std::vector<std::pair<uint64_t, uint32_t>> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    out.emplace_back(static_cast<uint64_t>(s.Int(0)), static_cast<uint32_t>(s.Int(1)));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: held allocations");
  return out;
}

Result<uint64_t> Ledger::AddEvent(const Event& e) {
  Stmt s(db_, "INSERT INTO events (at_ms, kind, job_id, user, message) VALUES (?1,?2,?3,?4,?5)");
  GPUSLICE_RETURN_IF_ERROR(s.prepared("ledger: add event"));
  s.Bind(1, e.at_ms);
  s.Bind(2, e.kind);
  s.Bind(3, static_cast<int64_t>(e.job_id));
  s.Bind(4, e.user);
  s.Bind(5, e.message);
  int rc = s.Step();
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: add event");
  return static_cast<uint64_t>(sqlite3_last_insert_rowid(db_));
}

Result<std::vector<Event>> Ledger::Events(const EventQuery& q) {
  // The newest `limit` matching rows, then put back in time order.
  Stmt s(db_,
         "SELECT id, at_ms, kind, job_id, user, message FROM events"
         " WHERE at_ms >= ?1 AND (?2 = 0 OR job_id = ?2) ORDER BY id DESC LIMIT ?3");
  GPUSLICE_RETURN_IF_ERROR(s.prepared("ledger: read events"));
  s.Bind(1, q.since_ms);
  s.Bind(2, static_cast<int64_t>(q.job_id));
  s.Bind(3, static_cast<int64_t>(q.limit));
  std::vector<Event> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    out.push_back({static_cast<uint64_t>(s.Int(0)), s.Int(1), s.Text(2),
                   static_cast<uint64_t>(s.Int(3)), s.Text(4), s.Text(5)});
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: read events");
  std::reverse(out.begin(), out.end());
  return out;
}

Result<std::vector<std::pair<std::string, uint64_t>>> Ledger::EventCountsByKind() {
  Stmt s(db_, "SELECT kind, count(*) FROM events GROUP BY kind ORDER BY kind");
  GPUSLICE_RETURN_IF_ERROR(s.prepared("ledger: count events"));
  std::vector<std::pair<std::string, uint64_t>> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW)
    out.emplace_back(s.Text(0), static_cast<uint64_t>(s.Int(1)));
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: count events");
  return out;
}

Status Ledger::SaveQuota(const core::Principal& who, const core::Quota& q, int64_t now_ms) {
  Stmt s(db_,
         "INSERT OR REPLACE INTO quotas (scope, name, memory_bytes, gpus, compute_milli,"
         " running_jobs, updated_ms) VALUES (?1,?2,?3,?4,?5,?6,?7)");
  GPUSLICE_RETURN_IF_ERROR(s.prepared("ledger: save quota"));
  s.Bind(1, std::string(core::PrincipalKindName(who.kind)));
  s.Bind(2, who.name);
  auto opt = [&](int i, auto v) {
    if (v) {
      s.Bind(i, static_cast<int64_t>(*v));
    } else {
      s.BindNull(i);
    }
  };
  opt(3, q.memory_bytes);
  opt(4, q.gpus);
  opt(5, q.compute_milli);
  opt(6, q.jobs);
  s.Bind(7, now_ms);
  int rc = s.Step();
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: save quota");
  return Status::Ok();
}

Status Ledger::RemoveQuota(const core::Principal& who) {
  Stmt s(db_, "DELETE FROM quotas WHERE scope = ?1 AND name = ?2");
  GPUSLICE_RETURN_IF_ERROR(s.prepared("ledger: remove quota"));
  s.Bind(1, std::string(core::PrincipalKindName(who.kind)));
  s.Bind(2, who.name);
  int rc = s.Step();
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: remove quota");
  if (sqlite3_changes(db_) == 0) return core::NotFoundError("no quota for " + who.ToString());
  return Status::Ok();
}

Result<std::vector<std::pair<core::Principal, core::Quota>>> Ledger::LoadQuotas() {
  Stmt s(db_,
         "SELECT scope, name, memory_bytes, gpus, compute_milli, running_jobs FROM quotas"
         " ORDER BY scope, name");
  GPUSLICE_RETURN_IF_ERROR(s.prepared("ledger: load quotas"));
  std::vector<std::pair<core::Principal, core::Quota>> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    core::Principal who;
    GPUSLICE_ASSIGN_OR_RETURN(who.kind, core::ParsePrincipalKind(s.Text(0)));
    who.name = s.Text(1);
    core::Quota q;
    if (!s.IsNull(2)) q.memory_bytes = static_cast<uint64_t>(s.Int(2));
    if (!s.IsNull(3)) q.gpus = static_cast<uint32_t>(s.Int(3));
    if (!s.IsNull(4)) q.compute_milli = static_cast<uint32_t>(s.Int(4));
    if (!s.IsNull(5)) q.jobs = static_cast<uint32_t>(s.Int(5));
    out.emplace_back(std::move(who), q);
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: load quotas");
  return out;
}

Status Ledger::SaveResize(const Job& job, int64_t now_ms) {
  GPUSLICE_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  auto body = [&]() -> Status {
    Stmt j(db_, "UPDATE jobs SET memory_bytes = ?2, compute_milli = ?3 WHERE id = ?1");
    GPUSLICE_RETURN_IF_ERROR(j.prepared("ledger: resize job"));
    j.Bind(1, static_cast<int64_t>(job.id));
    j.Bind(2, static_cast<int64_t>(job.request.memory_bytes));
    j.Bind(3, int64_t{job.request.compute_milli});
    int rc = j.Step();
    if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: resize job");
    // The old size ends now and the new one starts: accounting charges each
    // for its own time.
    Stmt rel(db_,
             "UPDATE allocations SET released_ms = ?2 WHERE job_id = ?1 AND released_ms IS NULL");
    GPUSLICE_RETURN_IF_ERROR(rel.prepared("ledger: resize allocation"));
    rel.Bind(1, static_cast<int64_t>(job.id));
    rel.Bind(2, now_ms);
    rc = rel.Step();
    if (rc != SQLITE_DONE) return SqliteError(db_, rc, "ledger: resize allocation");
    return InsertAllocations(job, now_ms);
  };
  Status s = body();
  if (!s.ok()) {
    (void)Exec("ROLLBACK");
    return s;
  }
  return Commit();
}

}  // namespace gpuslice::daemon
