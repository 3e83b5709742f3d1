#pragma once

// GET /v1/usage?since_ms=&until_ms=&by=user|group|job: accounting from the
// ledger's allocation rows (core/jobs/usage.h does the arithmetic; the definitions
// are in docs/ACCOUNTING.md).
//
// Who sees what: an admin (root, the admin group, the TCP token holder) sees
// every job; anyone else sees only their own jobs (grouped as asked), and the
// answer says so ("scope": "own"). Lists of jobs are public (`ps`), but how
// much each colleague used over a month is a report for admins.
//
// Defaults: since = 7 days before now, until = now, by = user.

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/jobs/usage.h"
#include "daemon/api/api.h"
#include "daemon/node/inventory.h"
#include "daemon/store/ledger.h"

namespace gpuslice::daemon {

inline constexpr int64_t kDefaultUsageWindowMs = 7LL * 24 * 3600 * 1000;

struct UsageQuery {
  int64_t since_ms = 0;
  int64_t until_ms = 0;
  core::UsageGroupBy by = core::UsageGroupBy::kUser;
};

// Reads since_ms, until_ms (epoch milliseconds) and by from the query
// string; errors name the parameter and its value.
core::Result<UsageQuery> ParseUsageQuery(const std::map<std::string, std::string>& query,
                                         int64_t now_ms);

// The compute slices of each MIG job among `rows` (job id -> slices; 0 for
// the other jobs without a whole GPU or a share), from the jobs' requests.
core::Result<std::map<uint64_t, uint32_t>> MigSlices(Ledger& ledger,
                                                     const std::vector<UsageRow>& rows);

// The ledger's rows as accounting records: group names from the system's
// group database (the gid when unknown), GPU memory from the inventory, MIG
// slices from MigSlices.
std::vector<core::UsageRecord> UsageRecords(const std::vector<UsageRow>& rows,
                                            const InventorySnapshot& inventory,
                                            const std::map<uint64_t, uint32_t>& mig_slices);

// The JSON answer of a report.
nlohmann::json UsageReportToJson(const core::UsageReport& report, const Caller& caller);

// Answers one request from `ledger` (null: no ledger, 503).
ApiResponse HandleUsage(const ApiRequest& request, Ledger* ledger,
                        const InventorySnapshot& inventory, int64_t now_ms);

// Registers GET /v1/usage. It reads through its own connection to the
// daemon's ledger (state_dir/ledger.db, opened on first use; WAL lets it read
// while the service writes), so a long report never holds the service's
// connection. `service` must outlive `api`.
void RegisterUsageApi(Api& api, Service& service);

}  // namespace gpuslice::daemon
