// `gpuslice usage`: accounting over a window (docs/ACCOUNTING.md). The daemon
// aggregates (GET /v1/usage); this prints its answer as a table, CSV or JSON.

#include <iostream>

#include "cli/commands/monitor.h"
#include "cli/view/table.h"
#include "core/jobs/usage.h"

namespace gpuslice::cli {

using nlohmann::json;

namespace {

struct UsageOptions {
  std::string since = "7d";
  std::string until = "now";
  std::string by = "user";
  std::string format = "table";
};
UsageOptions g_usage;

int UsageError(const std::string& what) {
  std::cerr << "gpuslice usage: " << what << "\n";
  return kExitUsage;
}

core::UsageTotals TotalsFromJson(const json& j) {
  core::UsageTotals t;
  t.key = j.value("key", "");
  t.user = j.value("user", "");
  t.name = j.value("name", "");
  t.jobs = j.value("jobs", uint64_t{0});
  t.gpu_hours = j.value("gpu_hours", 0.0);
  t.memory_gib_hours = j.value("memory_gib_hours", 0.0);
  t.compute_share_hours = j.value("compute_share_hours", 0.0);
  t.idle_hours = j.value("idle_hours", 0.0);
  t.idle_gpu_hours = j.value("idle_gpu_hours", 0.0);
  t.suspended_hours = j.value("suspended_hours", 0.0);
  return t;
}

}  // namespace

void SetupUsage(CLI::App* sub, Context*) {
  sub->add_option("--since", g_usage.since,
                  "Start of the window: a duration back from now (7d, 12h, 30m) or a UTC date "
                  "(2026-11-01, 2026-11-01T08:00) (default 7d)");
  sub->add_option("--until", g_usage.until, "End of the window, same forms (default now)");
  sub->add_option("--by", g_usage.by,
                  "user (default), group, job or slurm-job (the Slurm job a slice served)");
  sub->add_option("--format", g_usage.format, "table (default), csv or json");
}

int RunUsage(Context& ctx) {
  int64_t now = NowMs();
  auto since = core::ParseUsageTime(g_usage.since, now);
  if (!since.ok()) return UsageError("--since: " + since.status().message());
  auto until = core::ParseUsageTime(g_usage.until, now);
  if (!until.ok()) return UsageError("--until: " + until.status().message());
  if (*since >= *until) {
    return UsageError("--since " + g_usage.since + " is not before --until " + g_usage.until);
  }
  auto by = core::ParseUsageGroupBy(g_usage.by);
  if (!by.ok()) return UsageError(by.status().message());
  std::string format = ctx.json ? "json" : g_usage.format;
  if (format != "table" && format != "csv" && format != "json") {
    return UsageError("--format: '" + format + "' is not one of table, csv, json");
  }

  auto r = ctx.client->Call("GET", "/v1/usage?since_ms=" + std::to_string(*since) +
                                       "&until_ms=" + std::to_string(*until) +
                                       "&by=" + std::string(core::UsageGroupByName(*by)));
  if (!r.ok()) return ReportError(ctx, r.status());
  if (format == "json") {
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  core::UsageReport report;
  report.since_ms = r->value("since_ms", *since);
  report.until_ms = r->value("until_ms", *until);
  report.by = *by;
  for (const json& row : (*r)["rows"]) report.rows.push_back(TotalsFromJson(row));
  report.total = TotalsFromJson((*r)["total"]);
  if (format == "csv") {
    std::cout << core::RenderUsageCsv(report);
  } else {
    // CSV and JSON are data and stay exact; the table is for a terminal:
    // a job's name (and a Slurm job label) is its owner's text.
    for (core::UsageTotals& row : report.rows) {
      row.key = Shown(row.key);
      row.user = Shown(row.user);
      row.name = Shown(row.name);
    }
    std::cout << core::RenderUsageTable(report);
    if (r->value("scope", "all") == "own") {
      std::cout << "(your jobs only; root and the admin group see everyone's)\n";
    }
  }
  return 0;
}

}  // namespace gpuslice::cli
