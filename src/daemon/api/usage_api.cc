#include "daemon/api/usage_api.h"

#include <grp.h>

#include <charconv>
#include <chrono>
#include <memory>

#include "daemon/api/api_json.h"

namespace gpuslice::daemon {

using nlohmann::json;

namespace {

ApiResponse Json(int status, const json& j) {
  return {status, j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json", {}};
}

ApiResponse Error(const core::Status& s) { return Json(HttpStatusOf(s.code()), ErrorJson(s)); }

core::Result<int64_t> ParseMs(const std::string& name, const std::string& value) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc() || p != value.data() + value.size() || v < 0) {
    return core::InvalidArgumentError(name + ": expected milliseconds since the epoch, got '" +
                                      value + "'");
  }
  return v;
}

std::string GroupName(uint32_t gid, std::map<uint32_t, std::string>* cache) {
  auto it = cache->find(gid);
  if (it != cache->end()) return it->second;
  std::string name;
  struct group g;
  struct group* out = nullptr;
  std::vector<char> buf(16384);
  if (getgrgid_r(gid, &g, buf.data(), buf.size(), &out) == 0 && out != nullptr) {
    name = out->gr_name;
  }
  (*cache)[gid] = name;
  return name;
}

json TotalsToJson(const core::UsageTotals& t, core::UsageGroupBy by) {
  json j = {{"key", t.key},
            {"jobs", t.jobs},
            {"gpu_hours", t.gpu_hours},
            {"memory_gib_hours", t.memory_gib_hours},
            {"compute_share_hours", t.compute_share_hours},
            {"idle_hours", t.idle_hours},
            {"idle_gpu_hours", t.idle_gpu_hours},
            {"suspended_hours", t.suspended_hours}};
  if (by == core::UsageGroupBy::kJob) {
    j["user"] = t.user;
    j["name"] = t.name;
  }
  if (by == core::UsageGroupBy::kSlurmJob) j["user"] = t.user;
  return j;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

core::Result<UsageQuery> ParseUsageQuery(const std::map<std::string, std::string>& query,
                                         int64_t now_ms) {
  UsageQuery q;
  q.since_ms = now_ms - kDefaultUsageWindowMs;
  q.until_ms = now_ms;
  for (const auto& [key, value] : query) {
    if (key == "since_ms") {
      GPUSLICE_ASSIGN_OR_RETURN(q.since_ms, ParseMs(key, value));
    } else if (key == "until_ms") {
      GPUSLICE_ASSIGN_OR_RETURN(q.until_ms, ParseMs(key, value));
    } else if (key == "by") {
      GPUSLICE_ASSIGN_OR_RETURN(q.by, core::ParseUsageGroupBy(value));
    } else {
      return core::InvalidArgumentError("unknown parameter '" + key +
                                        "' (expected since_ms, until_ms, by)");
    }
  }
  if (q.since_ms >= q.until_ms) {
    return core::InvalidArgumentError("since_ms (" + std::to_string(q.since_ms) +
                                      ") must be before until_ms (" + std::to_string(q.until_ms) +
                                      ")");
  }
  return q;
}

core::Result<std::map<uint64_t, uint32_t>> MigSlices(Ledger& ledger,
                                                     const std::vector<UsageRow>& rows) {
  std::map<uint64_t, uint32_t> slices;
  for (const UsageRow& r : rows) {
    // Only a row without a whole GPU or a share can be a MIG instance.
    if (r.whole_gpu || r.compute_milli > 0 || slices.count(r.job_id)) continue;
    GPUSLICE_ASSIGN_OR_RETURN(std::optional<core::Job> job, ledger.LoadJob(r.job_id));
    bool mig = job && job->request.kind == core::RequestKind::kMig;
    slices[r.job_id] = mig ? job->request.mig.compute_slices : 0;
  }
  return slices;
}

std::vector<core::UsageRecord> UsageRecords(const std::vector<UsageRow>& rows,
                                            const InventorySnapshot& inventory,
                                            const std::map<uint64_t, uint32_t>& mig_slices) {
  std::map<uint32_t, uint64_t> memory;
  for (const GpuInfo& g : inventory.gpus) memory[g.index] = g.memory_total;
  std::map<uint32_t, std::string> groups;
  std::vector<core::UsageRecord> out;
  out.reserve(rows.size());
  for (const UsageRow& r : rows) {
    core::UsageRecord u;
    u.job_id = r.job_id;
    u.uid = r.uid;
    u.gid = r.gid;
    u.user = r.user;
    u.group = GroupName(r.gid, &groups);
    u.name = r.name;
    u.slurm_job = r.slurm_job;
    u.gpu_index = r.gpu_index;
    // A GPU that has left the machine since: its memory is unknown, and a
    // fraction without a share on it weighs nothing (docs/ACCOUNTING.md).
    auto m = memory.find(r.gpu_index);
    u.gpu_memory_total = m == memory.end() ? 0 : m->second;
    u.whole_gpu = r.whole_gpu;
    u.memory_bytes = r.memory_bytes;
    u.compute_milli = r.compute_milli;
    if (auto it = mig_slices.find(r.job_id); it != mig_slices.end()) {
      u.mig_compute_slices = it->second;
    }
    u.allocated_ms = r.allocated_ms;
    u.released_ms = r.released_ms;
    u.suspended_in_window_ms = r.suspended_in_window_ms;
    u.suspension_only = r.suspension_only;
    u.job_started_ms = r.job_started_ms;
    u.job_ended_ms = r.job_ended_ms;
    u.job_idle_ms = r.job_idle_ms;
    u.job_suspended_ms = r.job_suspended_ms;
    out.push_back(std::move(u));
  }
  return out;
}

json UsageReportToJson(const core::UsageReport& report, const Caller& caller) {
  json rows = json::array();
  for (const core::UsageTotals& t : report.rows) rows.push_back(TotalsToJson(t, report.by));
  json j = {{"since_ms", report.since_ms},
            {"until_ms", report.until_ms},
            {"by", std::string(core::UsageGroupByName(report.by))},
            {"scope", caller.admin ? "all" : "own"},
            {"rows", rows},
            {"total", TotalsToJson(report.total, report.by)}};
  if (!caller.admin) j["uid"] = caller.uid;
  return j;
}

ApiResponse HandleUsage(const ApiRequest& request, Ledger* ledger,
                        const InventorySnapshot& inventory, int64_t now_ms) {
  auto q = ParseUsageQuery(request.query, now_ms);
  if (!q.ok()) return Error(q.status());
  if (ledger == nullptr) {
    return Error(core::UnavailableError("usage: the ledger is not available"));
  }
  auto rows = ledger->UsageRows(q->since_ms, std::min(q->until_ms, now_ms));
  if (!rows.ok()) return Error(rows.status());
  if (!request.caller.admin) {
    std::erase_if(*rows, [&](const UsageRow& r) { return r.uid != request.caller.uid; });
  }
  auto mig = MigSlices(*ledger, *rows);
  if (!mig.ok()) return Error(mig.status());
  auto report = core::AggregateUsage(UsageRecords(*rows, inventory, *mig), q->since_ms, q->until_ms,
                                     now_ms, q->by);
  if (!report.ok()) return Error(report.status());
  return Json(200, UsageReportToJson(*report, request.caller));
}

void RegisterUsageApi(Api& api, Service& service) {
  // Opened on first use, and again after a failure (the daemon may have
  // started degraded and repaired its ledger since).
  auto ledger = std::make_shared<std::unique_ptr<Ledger>>();
  api.AddRoute("GET", "/v1/usage", [&service, ledger](const ApiRequest& request) {
    if (*ledger == nullptr) {
      auto opened = Ledger::Open(service.options().state_dir + "/ledger.db");
      if (!opened.ok()) {
        return Error(
            core::UnavailableError("usage: cannot read the ledger: " + opened.status().message()));
      }
      *ledger = std::move(*opened);
    }
    return HandleUsage(request, ledger->get(), service.inventory(), NowMs());
  });
}

}  // namespace gpuslice::daemon
