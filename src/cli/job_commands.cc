// The CLI's commands on several jobs or one job in full (see commands.h):
// `cancel` (ids, or --user/--state as in Slurm's scancel) and `show`.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "cli/commands.h"
#include "cli/job_select.h"
#include "cli/ps_view.h"
#include "cli/table.h"
#include "core/strings.h"
#include "core/units.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

struct CancelOptions {
  std::vector<uint64_t> ids;
  std::optional<std::string> user;
  std::optional<std::string> state;
  CLI::Option* user_flag = nullptr;  // Given, with or without a name.
} g_cancel;

void SetupCancel(CLI::App* sub, Context*) {
  sub->add_option("ids", g_cancel.ids, "Job ids");
  g_cancel.user_flag =
      sub->add_option("-u,--user", g_cancel.user,
                      "Every live job of this user (default: yours), or of the ids given")
          ->expected(0, 1);
  sub->add_option("--state", g_cancel.state,
                  "Only jobs in this state: queued, running or both (queued,running)");
}

int Cancel(Context& ctx) {
  JobFilter filter;
  if (g_cancel.user_flag->count() > 0) {
    filter.user = g_cancel.user && !g_cancel.user->empty() ? *g_cancel.user : CurrentUser();
  }
  if (g_cancel.state) {
    auto s = ParseStates(*g_cancel.state);
    if (!s.ok()) return UsageError(ctx, s.status());
    filter.states = *s;
  }
  if (g_cancel.ids.empty() && !filter.user && filter.states.empty()) {
    return UsageError(
        ctx, core::InvalidArgumentError("cancel: give job ids, --user [NAME] or --state STATE"));
  }
  std::vector<uint64_t> ids = g_cancel.ids;
  if (filter.user || !filter.states.empty()) {
    // Which of the live jobs (or of the ids given) pass the filter.
    auto list = ctx.client->Call("GET", "/v1/jobs");
    if (!list.ok()) return ReportError(ctx, list.status());
    std::vector<uint64_t> picked;
    const json matching = Filter(*list, filter);
    for (const json& j : matching["jobs"]) {
      uint64_t id = j["id"];
      if (g_cancel.ids.empty() ||
          std::find(g_cancel.ids.begin(), g_cancel.ids.end(), id) != g_cancel.ids.end()) {
        picked.push_back(id);
      }
    }
    ids = picked;
    if (ids.empty() && !ctx.json) std::cout << "no job to cancel\n";
  }
  int rc = 0;
  json done = json::array();
  for (uint64_t id : ids) {
    auto r = ctx.client->Call("POST", "/v1/jobs/" + std::to_string(id) + "/cancel");
    if (!r.ok()) {
      rc = ReportError(ctx, r.status());
      continue;
    }
    if (ctx.json) {
      done.push_back(*r);
    } else {
      std::cout << "job " << id << ": "
                << ((*r)["state"] == "running" ? "cancelling (processes signalled)" : "cancelled")
                << "\n";
    }
  }
  if (ctx.json)
    std::cout << (done.size() == 1 && !filter.user && filter.states.empty()
                      ? done[0].dump(2)
                      : json{{"jobs", done}}.dump(2))
              << "\n";
  return rc;
}

std::string LocalTime(int64_t ms) {
  if (ms <= 0) return "-";
  time_t t = static_cast<time_t>(ms / 1000);
  struct tm tm;
  localtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string Joined(const json& array, const std::string& sep) {
  std::string out;
  for (const json& v : array) {
    out += (out.empty() ? "" : sep) + (v.is_string() ? v.get<std::string>() : v.dump());
  }
  return out;
}

// Everything about one job: its record, its transitions and its events.
int Show(Context& ctx) {
  std::string target = "/v1/jobs/" + std::to_string(ctx.job_id);
  auto job = ctx.client->Call("GET", target);
  if (!job.ok()) return ReportError(ctx, job.status());
  auto events = ctx.client->Call("GET", "/v1/events?limit=1000&job=" + std::to_string(ctx.job_id));
  if (ctx.json) {
    json out = *job;
    if (events.ok()) out["events"] = (*events)["events"];
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  const json& j = *job;
  const json& req = j["request"];
  int64_t now = NowMs();
  int64_t started = j.value("started_ms", int64_t{0}), ended = j.value("ended_ms", int64_t{0});
  Table t({"FIELD", "VALUE"});
  auto add = [&](const std::string& k, const std::string& v) {
    if (!v.empty()) t.Add({k, v});
  };
  add("id", std::to_string(j["id"].get<uint64_t>()));
  add("name", j.value("name", ""));
  add("user", j.value("user", "") + " (uid " + std::to_string(j.value("uid", 0)) + ")");
  add("state", j.value("state", ""));
  add("reason", j.value("reason", ""));
  if (int code = j.value("exit_code", -1); code >= 0) {
    const char* sig = SignalName(code);
    add("exit code", std::to_string(code) + (sig ? std::string(" (") + sig + ")" : ""));
  }
  add("mode", j.value("mode", ""));
  add("request", req.value("describe", ""));
  add("priority", req.value("priority", ""));
  add("pool", req.value("pool", ""));
  add("GPU model", req.value("gpu_model", ""));
  if (req.contains("max_runtime_ms")) {
    add("max runtime",
        core::FormatDuration(std::chrono::milliseconds(req["max_runtime_ms"].get<int64_t>())));
  }
  add("restartable", j.value("restartable", false) ? "yes" : "");
  add("idle reclaim", j.value("no_idle_reclaim", false) ? "exempt (--no-idle-reclaim)" : "");
  if (j.contains("fair_share") && j["fair_share"].is_number()) {
    char fs[32];
    std::snprintf(fs, sizeof fs, "%.2f", j["fair_share"].get<double>());
    add("fair share", std::string(fs) + " (1: used nothing lately; 0.5: used its share)");
  }
  if (j.contains("image")) {
    add("image", j.value("image", "") + " (" + j.value("engine", "") + ")");
  }
  add("command", j.value("mode", "") == "external"
                     ? std::string("(none: external, its processes are started elsewhere)")
                     : Joined(j.value("argv", json::array()), " "));
  if (j.contains("labels") && j["labels"].is_object() && !j["labels"].empty()) {
    std::vector<std::string> labels;
    for (const auto& [k, v] : j["labels"].items()) {
      labels.push_back(k + "=" + (v.is_string() ? v.get<std::string>() : v.dump()));
    }
    add("labels", core::Join(labels, ", "));
  }
  add("directory", j.value("cwd", ""));
  add("submitted", LocalTime(j.value("submitted_ms", int64_t{0})) + " (" +
                       FormatAge(now - j.value("submitted_ms", now)) + " ago)");
  if (started > 0) add("started", LocalTime(started));
  if (ended > 0) add("ended", LocalTime(ended));
  if (started > 0 && j.value("state", "") != "queued") {
    add("elapsed", FormatAge((ended > 0 ? ended : now) - started));
  }
  if (j.contains("queue_position")) {
    add("queue position", std::to_string(j["queue_position"].get<int>()));
  }
  add("after", DependenciesText(j));
  add("waiting for", j.value("waiting_for", ""));
  if (j.contains("expected_start_ms")) {
    add("expected start", LocalTime(j["expected_start_ms"].get<int64_t>()));
  }
  if (j.contains("allocation")) {
    add("GPUs", Joined(j["allocation"]["gpu_indices"], ","));
    add("GPU UUIDs", Joined(j["allocation"]["gpu_uuids"], ","));
  }
  if (j.contains("flags")) add("flags", Joined(j["flags"], ","));
  if (j.contains("usage")) {
    const json& u = j["usage"];
    const uint64_t used = u.value("memory_used_bytes", uint64_t{0}),
                   limit = u.value("memory_limit_bytes", uint64_t{0}),
                   peak = u.value("memory_peak_bytes", uint64_t{0});
    add("memory used", core::FormatBytes(used) + " of " + core::FormatBytes(limit) + " (peak " +
                           core::FormatBytes(peak) + ")");
    add("GPU use", u.contains("gpu_util_pct")
                       ? std::to_string(u["gpu_util_pct"].get<int>()) + "%"
                       : "n/a (NVML has no figure for its MIG instance on this GPU: no GPM)");
  }
  add("pid", j.value("pid", 0) > 0 ? std::to_string(j["pid"].get<int>()) : "");
  std::cout << t.Render();
  if (j.contains("transitions") && !j["transitions"].empty()) {
    Table tr({"AT", "FROM", "TO", "REASON"});
    for (const json& x : j["transitions"]) {
      tr.Add({LocalTime(x.value("at_ms", int64_t{0})), x.value("from", ""), x.value("to", ""),
              x.value("reason", "")});
    }
    std::cout << "\nTransitions:\n" << tr.Render();
  }
  if (events.ok() && !(*events)["events"].empty()) {
    Table ev({"AT", "KIND", "MESSAGE"});
    for (const json& e : (*events)["events"]) {
      ev.Add(
          {LocalTime(e.value("at_ms", int64_t{0})), e.value("kind", ""), e.value("message", "")});
    }
    std::cout << "\nEvents:\n" << ev.Render();
  }
  return 0;
}

void SetupShow(CLI::App* sub, Context* ctx) {
  sub->add_option("id", ctx->job_id, "Job id")->required();
}

}  // namespace

std::vector<Command> JobCommands() {
  return {
      {"cancel",
       "End jobs: by id (cancel 3 4 5), or all of a user's (--user [NAME]) or in a state "
       "(--state queued); yours, or any for root and the admin group",
       SetupCancel, Cancel},
      {"show", "Everything about one job: request, times, GPUs, use, transitions, events",
       SetupShow, Show},
  };
}

}  // namespace gpuslice::cli
