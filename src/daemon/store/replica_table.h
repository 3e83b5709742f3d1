#pragma once

// The ledger tables of autoscaled services (created by ledger migration 2,
// documented in docs/SERVICES.md): `services`, one row per service, and
// `service_replicas`, one row per replica job the service still tracks. They
// live in the ledger file, so a service and its replicas are as durable as
// the jobs themselves.
//
// Open() makes a second connection to the ledger file the Service has
// already opened and migrated (the Service does not hand out its own);
// SQLite in WAL mode serves both, and as the daemon's one thread finishes
// every transaction before the next starts, they never wait on each other.
// With a borrowed connection (e.g. Ledger::db()) the table uses that.
//
// Thread safety: none; the daemon's event thread calls it, like the ledger.

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/jobs/autoscale.h"
#include "core/status.h"

namespace gpuslice::daemon {

struct StoredService {
  uint64_t id = 0;  // Assigned by Insert.
  std::string name;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string user;
  core::ReplicaRange range;
  uint32_t desired = 1;
  uint32_t target_milli = 700;
  // JSON object: the replicas' request fields as a POST /v1/jobs body would
  // carry them ("mem", "compute", "priority"...) under "request", and the
  // windows ("scale_up_after_ms", "scale_down_after_ms", "cooldown_ms").
  std::string spec;
  std::vector<std::string> argv;
  std::string cwd;
  std::vector<std::string> env;
  int64_t created_ms = 0;
  std::vector<uint64_t> replica_jobs;  // Filled by LoadLive.
};

class ServiceTable {
 public:
  // Opens the existing ledger at `path` (never creates one). Errors when it
  // is missing, not a gpuslice ledger, or older than migration 2.
  static core::Result<std::unique_ptr<ServiceTable>> Open(const std::string& path);
  // Borrows `db`, a ledger connection migrated to at least version 2.
  explicit ServiceTable(sqlite3* db) : db_(db) {}
  ~ServiceTable();
  ServiceTable(const ServiceTable&) = delete;
  ServiceTable& operator=(const ServiceTable&) = delete;

  // Inserts `s` and returns its id. A removed service of the same name is
  // forgotten first (names are unique in the table); a live one is
  // AlreadyExists.
  core::Result<uint64_t> Insert(const StoredService& s, int64_t now_ms);
  // Stores the range, desired count, target and spec of service `s.id`.
  core::Status Update(const StoredService& s, int64_t now_ms);
  // Marks the service removed and forgets its replica rows.
  core::Status MarkRemoved(uint64_t id, int64_t now_ms);
  core::Status AddReplica(uint64_t service_id, uint64_t job_id);
  core::Status DropReplica(uint64_t service_id, uint64_t job_id);
  // Services not removed, by id, with their replica job ids.
  core::Result<std::vector<StoredService>> LoadLive();

 private:
  core::Status Exec(const char* sql, const char* what);

  sqlite3* db_;
  bool owned_ = false;
};

}  // namespace gpuslice::daemon
