#include "daemon/store/replica_table.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "daemon/store/ledger.h"
#include "daemon/store/sqlite_stmt.h"

namespace gpuslice::daemon {
namespace {

using core::Result;
using core::Status;

using Stmt = SqliteStmt;

Result<std::vector<std::string>> Strings(const std::string& text, const char* column) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) {
    return core::InternalError(std::string("services: column ") + column + " is not a JSON array");
  }
  std::vector<std::string> out;
  for (const auto& e : j) {
    if (!e.is_string()) {
      return core::InternalError(std::string("services: column ") + column + " holds a non-string");
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<ServiceTable>> ServiceTable::Open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr);
  if (rc != SQLITE_OK) {
    Status s = SqliteError(db, rc, "services: open ledger " + path);
    sqlite3_close(db);
    return s;
  }
  auto table = std::make_unique<ServiceTable>(db);
  table->owned_ = true;
  sqlite3_busy_timeout(db, 2000);
  GPUSLICE_RETURN_IF_ERROR(table->Exec("PRAGMA foreign_keys=ON", "services: open"));
  Stmt id(db, "PRAGMA application_id");
  GPUSLICE_RETURN_IF_ERROR(id.prepared("services: open"));
  if (id.Step() != SQLITE_ROW || id.Int(0) != kLedgerApplicationId) {
    return core::FailedPreconditionError("services: " + path + " is not a gpuslice ledger");
  }
  Stmt version(db, "SELECT version FROM schema_version");
  GPUSLICE_RETURN_IF_ERROR(version.prepared("services: schema version"));
  if (version.Step() != SQLITE_ROW || version.Int(0) < 2) {
    return core::FailedPreconditionError("services: ledger " + path +
                                         " predates the services tables (migration 2)");
  }
  return table;
}

ServiceTable::~ServiceTable() {
  if (owned_) sqlite3_close(db_);
}

Status ServiceTable::Exec(const char* sql, const char* what) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  sqlite3_free(err);
  return rc == SQLITE_OK ? Status::Ok() : SqliteError(db_, rc, what);
}

Result<uint64_t> ServiceTable::Insert(const StoredService& s, int64_t now_ms) {
  GPUSLICE_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE", "services: begin"));
  auto body = [&]() -> Result<uint64_t> {
    {
      Stmt live(db_, "SELECT id FROM services WHERE name = ?1 AND removed_ms IS NULL");
      GPUSLICE_RETURN_IF_ERROR(live.prepared("services: find"));
      live.Bind(1, s.name);
      int rc = live.Step();
      if (rc == SQLITE_ROW) {
        return core::AlreadyExistsError("a service named '" + s.name + "' exists");
      }
      if (rc != SQLITE_DONE) return SqliteError(db_, rc, "services: find");
    }
    // A removed service of that name: its history is in the events; the row
    // goes so the name can be used again.
    Stmt drop_replicas(db_,
                       "DELETE FROM service_replicas WHERE service_id IN "
                       "(SELECT id FROM services WHERE name = ?1)");
    GPUSLICE_RETURN_IF_ERROR(drop_replicas.prepared("services: forget removed"));
    drop_replicas.Bind(1, s.name);
    GPUSLICE_RETURN_IF_ERROR(drop_replicas.Run("services: forget removed"));
    Stmt drop(db_, "DELETE FROM services WHERE name = ?1");
    GPUSLICE_RETURN_IF_ERROR(drop.prepared("services: forget removed"));
    drop.Bind(1, s.name);
    GPUSLICE_RETURN_IF_ERROR(drop.Run("services: forget removed"));

    Stmt ins(db_,
             "INSERT INTO services (name, uid, gid, user, replicas_min, replicas_max, desired, "
             "target_util_pct, spec, argv, cwd, env, created_ms, updated_ms) "
             "VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?13)");
    GPUSLICE_RETURN_IF_ERROR(ins.prepared("services: insert"));
    ins.Bind(1, s.name);
    ins.Bind(2, int64_t{s.uid});
    ins.Bind(3, int64_t{s.gid});
    ins.Bind(4, s.user);
    ins.Bind(5, int64_t{s.range.min});
    ins.Bind(6, int64_t{s.range.max});
    ins.Bind(7, int64_t{s.desired});
    ins.Bind(8, s.target_milli / 10.0);
    ins.Bind(9, s.spec);
    ins.Bind(10, nlohmann::json(s.argv).dump());
    ins.Bind(11, s.cwd);
    ins.Bind(12, nlohmann::json(s.env).dump());
    ins.Bind(13, now_ms);
    GPUSLICE_RETURN_IF_ERROR(ins.Run("services: insert"));
    return static_cast<uint64_t>(sqlite3_last_insert_rowid(db_));
  };
  Result<uint64_t> id = body();
  if (!id.ok()) {
    (void)Exec("ROLLBACK", "services: rollback");
    return id;
  }
  GPUSLICE_RETURN_IF_ERROR(Exec("COMMIT", "services: commit"));
  return id;
}

Status ServiceTable::Update(const StoredService& s, int64_t now_ms) {
  Stmt up(db_,
          "UPDATE services SET replicas_min = ?2, replicas_max = ?3, desired = ?4, "
          "target_util_pct = ?5, spec = ?6, updated_ms = ?7 WHERE id = ?1");
  GPUSLICE_RETURN_IF_ERROR(up.prepared("services: update"));
  up.Bind(1, static_cast<int64_t>(s.id));
  up.Bind(2, int64_t{s.range.min});
  up.Bind(3, int64_t{s.range.max});
  up.Bind(4, int64_t{s.desired});
  up.Bind(5, s.target_milli / 10.0);
  up.Bind(6, s.spec);
  up.Bind(7, now_ms);
  GPUSLICE_RETURN_IF_ERROR(up.Run("services: update"));
  if (sqlite3_changes(db_) != 1) {
    return core::NotFoundError("services: no service with id " + std::to_string(s.id));
  }
  return Status::Ok();
}

Status ServiceTable::MarkRemoved(uint64_t id, int64_t now_ms) {
  GPUSLICE_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE", "services: begin"));
  auto body = [&]() -> Status {
    Stmt drop(db_, "DELETE FROM service_replicas WHERE service_id = ?1");
    GPUSLICE_RETURN_IF_ERROR(drop.prepared("services: remove"));
    drop.Bind(1, static_cast<int64_t>(id));
    GPUSLICE_RETURN_IF_ERROR(drop.Run("services: remove"));
    Stmt mark(db_, "UPDATE services SET removed_ms = ?2, updated_ms = ?2 WHERE id = ?1");
    GPUSLICE_RETURN_IF_ERROR(mark.prepared("services: remove"));
    mark.Bind(1, static_cast<int64_t>(id));
    mark.Bind(2, now_ms);
    return mark.Run("services: remove");
  };
  Status s = body();
  if (!s.ok()) {
    (void)Exec("ROLLBACK", "services: rollback");
    return s;
  }
  return Exec("COMMIT", "services: commit");
}

Status ServiceTable::AddReplica(uint64_t service_id, uint64_t job_id) {
  Stmt ins(db_, "INSERT OR IGNORE INTO service_replicas (service_id, job_id) VALUES (?1, ?2)");
  GPUSLICE_RETURN_IF_ERROR(ins.prepared("services: add replica"));
  ins.Bind(1, static_cast<int64_t>(service_id));
  ins.Bind(2, static_cast<int64_t>(job_id));
  return ins.Run("services: add replica");
}

Status ServiceTable::DropReplica(uint64_t service_id, uint64_t job_id) {
  Stmt del(db_, "DELETE FROM service_replicas WHERE service_id = ?1 AND job_id = ?2");
  GPUSLICE_RETURN_IF_ERROR(del.prepared("services: drop replica"));
  del.Bind(1, static_cast<int64_t>(service_id));
  del.Bind(2, static_cast<int64_t>(job_id));
  return del.Run("services: drop replica");
}

Result<std::vector<StoredService>> ServiceTable::LoadLive() {
  std::vector<StoredService> out;
  Stmt q(db_,
         "SELECT id, name, uid, gid, user, replicas_min, replicas_max, desired, target_util_pct, "
         "spec, argv, cwd, env, created_ms FROM services WHERE removed_ms IS NULL ORDER BY id");
  GPUSLICE_RETURN_IF_ERROR(q.prepared("services: load"));
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) {
    StoredService s;
    s.id = static_cast<uint64_t>(q.Int(0));
    s.name = q.Text(1);
    s.uid = static_cast<uint32_t>(q.Int(2));
    s.gid = static_cast<uint32_t>(q.Int(3));
    s.user = q.Text(4);
    s.range.min = static_cast<uint32_t>(q.Int(5));
    s.range.max = static_cast<uint32_t>(q.Int(6));
    s.desired = static_cast<uint32_t>(q.Int(7));
    s.target_milli = static_cast<uint32_t>(std::lround(q.Real(8) * 10));
    s.spec = q.Text(9);
    GPUSLICE_ASSIGN_OR_RETURN(s.argv, Strings(q.Text(10), "argv"));
    s.cwd = q.Text(11);
    GPUSLICE_ASSIGN_OR_RETURN(s.env, Strings(q.Text(12), "env"));
    s.created_ms = q.Int(13);
    out.push_back(std::move(s));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "services: load");
  for (StoredService& s : out) {
    Stmt r(db_, "SELECT job_id FROM service_replicas WHERE service_id = ?1 ORDER BY job_id");
    GPUSLICE_RETURN_IF_ERROR(r.prepared("services: load replicas"));
    r.Bind(1, static_cast<int64_t>(s.id));
    while ((rc = r.Step()) == SQLITE_ROW) s.replica_jobs.push_back(static_cast<uint64_t>(r.Int(0)));
    if (rc != SQLITE_DONE) return SqliteError(db_, rc, "services: load replicas");
  }
  return out;
}

}  // namespace gpuslice::daemon
