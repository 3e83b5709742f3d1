#pragma once

// One prepared SQLite statement, finalised on scope exit, for the daemon's
// ledger modules (ledger.cc, replica_table.cc). Bind* take 1-based indices;
// errors become a Status through SqliteError (ledger.h), the one place that
// translates SQLite result codes.

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "core/status.h"
#include "daemon/store/ledger.h"

namespace gpuslice::daemon {

class SqliteStmt {
 public:
  SqliteStmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~SqliteStmt() { sqlite3_finalize(stmt_); }
  SqliteStmt(const SqliteStmt&) = delete;
  SqliteStmt& operator=(const SqliteStmt&) = delete;

  // Whether preparing it worked; `what` names the statement in the error.
  core::Status prepared(const char* what) const {
    return rc_ == SQLITE_OK ? core::Status::Ok() : SqliteError(db_, rc_, what);
  }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  // An int would be as close to double as to int64_t: say which.
  void Bind(int i, int v) { sqlite3_bind_int64(stmt_, i, v); }
  void Bind(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  void Bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void BindNull(int i) { sqlite3_bind_null(stmt_, i); }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return sqlite3_step(stmt_); }
  // Steps a statement that returns no rows.
  core::Status Run(const char* what) {
    int rc = sqlite3_step(stmt_);
    return rc == SQLITE_DONE ? core::Status::Ok() : SqliteError(db_, rc, what);
  }
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Real(int col) const { return sqlite3_column_double(stmt_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string Text(int col) const {
    const unsigned char* t = sqlite3_column_text(stmt_, col);
    return t ? std::string(reinterpret_cast<const char*>(t)) : std::string();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
};

}  // namespace gpuslice::daemon
