// The CLI's commands on several jobs or one job in full (see commands.h):
// `cancel` (ids, or --user/--state as in Slurm's scancel) and `show`.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "cli/commands/commands.h"
#include "cli/parse/job_select.h"
#include "cli/view/ps_view.h"
#include "cli/view/table.h"
#include "core/jobs/dependency.h"
#include "core/strings.h"
#include "core/units.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

struct CancelOptions {
  std::vector<uint64_t> ids;
  std::optional<std::string> user;
  std::optional<std::string> state;
  std::vector<std::string> names;
  bool all_users = false;
  CLI::Option* user_flag = nullptr;  // Given, with or without a name.
} g_cancel;

void SetupCancel(CLI::App* sub, Context*) {
  sub->add_option("ids", g_cancel.ids, "Job ids");
  g_cancel.user_flag =
      sub->add_option("-u,--user", g_cancel.user,
                      "Every live job of this user (default: yours), or of the ids given")
          ->expected(0, 1);
  sub->add_option("--state", g_cancel.state,
                  "Only jobs in these states: queued, running, suspended (comma-separated); "
                  "without ids or --user, your own jobs, as scancel");
  sub->add_option("--name", g_cancel.names,
                  "Only jobs of this name (an array's name: all its members; * matches any "
                  "characters); without ids or --user, your own jobs")
      ->delimiter(',');
  sub->add_flag("--all-users", g_cancel.all_users,
                "With --state or --name: every user's jobs, not only yours (root and the admin "
                "group may cancel them)");
}

int Cancel(Context& ctx) {
  const bool by_user = g_cancel.user_flag->count() > 0;
  if (g_cancel.ids.empty() && !by_user && !g_cancel.state && g_cancel.names.empty()) {
    return UsageError(ctx,
                      core::InvalidArgumentError(
                          "cancel: give job ids, --user [NAME], --state STATE or --name NAME"));
  }
  if (g_cancel.all_users && (by_user || !g_cancel.ids.empty())) {
    return UsageError(ctx, core::InvalidArgumentError(
                               "cancel: --all-users goes with --state or --name, not with ids or "
                               "--user"));
  }
  JobFilter filter;
  filter.limit = 0;  // All that match.
  filter.names = g_cancel.names;
  if (g_cancel.state) {
    auto s = ParseStates(*g_cancel.state);
    if (!s.ok()) return UsageError(ctx, s.status());
    if (WantsEndedJobs(*s)) {
      return UsageError(ctx, core::InvalidArgumentError(
                                 "--state: only live jobs can be cancelled (queued, running, "
                                 "suspended)"));
    }
    filter.states = *s;
  }
  if (by_user) {
    filter.user = g_cancel.user && !g_cancel.user->empty() ? *g_cancel.user : CurrentUser();
  } else if (g_cancel.ids.empty() && !g_cancel.all_users) {
    // As scancel: a state or a name picks among the caller's own jobs,
    // never other users' (else `cancel --state queued` would go through
    // everyone's queue, refused job after job).
    filter.user = CurrentUser();
  }
  std::vector<uint64_t> ids = g_cancel.ids;
  if (filter.user || !filter.states.empty() || !filter.names.empty()) {
    // The daemon picks the jobs that pass the filters (of the ids given).
    auto list = ctx.client->Call("GET", JobsTarget("/v1/jobs", filter));
    if (!list.ok()) return ReportError(ctx, list.status());
    std::vector<uint64_t> picked;
    for (const json& j : (*list)["jobs"]) {
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
  const bool selected = filter.user || !filter.states.empty() || !filter.names.empty();
  if (ctx.json)
    std::cout << (done.size() == 1 && !selected ? done[0].dump(2) : json{{"jobs", done}}.dump(2))
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

struct ShowOptions {
  std::optional<std::string> name;
} g_show;

// The one job named `name` (finished ones too), for `show --name`.
core::Result<uint64_t> JobNamed(Context& ctx, const std::string& name) {
  JobFilter filter;
  filter.names = {name};
  filter.finished = true;
  filter.limit = 20;
  GPUSLICE_ASSIGN_OR_RETURN(json list, ctx.client->Call("GET", JobsTarget("/v1/jobs", filter)));
  const json& jobs = list["jobs"];
  if (jobs.empty()) return core::NotFoundError("no job named '" + name + "'");
  if (jobs.size() == 1) return jobs[0]["id"].get<uint64_t>();
  std::string ids;
  for (const json& j : jobs)
    ids += (ids.empty() ? "" : ", ") + std::to_string(j["id"].get<uint64_t>());
  return core::InvalidArgumentError("several jobs are named '" + name + "': " + ids +
                                    (list.contains("next_cursor") ? ", ..." : "") +
                                    "; give one id (gpuslice show ID)");
}

// Everything about one job: its record, its transitions and its events.
int Show(Context& ctx) {
  if ((ctx.job_id != 0) == g_show.name.has_value()) {
    return UsageError(ctx, core::InvalidArgumentError("show: give a job id or --name NAME"));
  }
  if (g_show.name) {
    auto id = JobNamed(ctx, *g_show.name);
    if (!id.ok()) {
      return id.status().code() == core::StatusCode::kInvalidArgument
                 ? UsageError(ctx, id.status())
                 : ReportError(ctx, id.status());
    }
    ctx.job_id = *id;
  }
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
  if (j.contains("hold")) add("hold", j.value("hold", "") == "admin" ? "by an admin" : "yes");
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
  sub->add_option("id", ctx->job_id, "Job id");
  sub->add_option("--name", g_show.name,
                  "The job of this name (when only one job has it; finished ones count)");
}

// hold, release: each job id given; update: one queued job.
struct QueuedOptions {
  std::vector<uint64_t> ids;
  std::optional<std::string> mem, compute, priority, after;
} g_queued;

void SetupIds(CLI::App* sub, Context*) {
  sub->add_option("ids", g_queued.ids, "Job ids")->required();
}

int OnEach(Context& ctx, const char* verb) {
  int rc = 0;
  json done = json::array();
  for (uint64_t id : g_queued.ids) {
    auto r = ctx.client->Call("POST", "/v1/jobs/" + std::to_string(id) + "/" + verb);
    if (!r.ok()) {
      rc = ReportError(ctx, r.status());
      continue;
    }
    if (ctx.json) {
      done.push_back(*r);
    } else {
      std::cout << "job " << id << ": " << (std::string(verb) == "hold" ? "held" : "released")
                << "\n";
    }
  }
  if (ctx.json) std::cout << (done.size() == 1 ? done[0] : json{{"jobs", done}}).dump(2) << "\n";
  return rc;
}

int HoldCmd(Context& ctx) { return OnEach(ctx, "hold"); }
int ReleaseCmd(Context& ctx) { return OnEach(ctx, "release"); }

void SetupUpdate(CLI::App* sub, Context* ctx) {
  sub->add_option("id", ctx->job_id, "Job id (a queued job)")->required();
  sub->add_option("--mem", g_queued.mem, "Its memory, e.g. 16GiB (a --mem job)");
  sub->add_option("--compute", g_queued.compute, "Its compute share, e.g. 40% (a --mem job)");
  sub->add_option("--priority", g_queued.priority, "low, normal or high");
  sub->add_option("--after", g_queued.after,
                  "Its dependencies, replacing those it had: as submit --after (12,13:ok), or "
                  "none");
}

int Update(Context& ctx) {
  // Checked as the daemon checks them, so a bad value is a usage error.
  json body = json::object();
  if (g_queued.mem) {
    auto m = core::ParseMemorySize(*g_queued.mem);
    if (!m.ok()) return UsageError(ctx, m.status().WithContext("--mem"));
    body["mem"] = *g_queued.mem;
  }
  if (g_queued.compute) {
    auto c = core::ParseShareMilli(*g_queued.compute);
    if (!c.ok()) return UsageError(ctx, c.status().WithContext("--compute"));
    body["compute"] = *g_queued.compute;
  }
  if (g_queued.priority) {
    auto p = core::ParsePriority(*g_queued.priority);
    if (!p.ok()) return UsageError(ctx, p.status().WithContext("--priority"));
    body["priority"] = *g_queued.priority;
  }
  if (g_queued.after) {
    if (*g_queued.after == "none") {
      body["after"] = "";
    } else {
      auto d = core::ParseDependencies(*g_queued.after);
      if (!d.ok()) return UsageError(ctx, d.status());
      body["after"] = core::FormatDependencies(*d);
    }
  }
  if (body.empty()) {
    return UsageError(
        ctx, core::InvalidArgumentError("update: give --mem, --compute, --priority or --after"));
  }
  auto r = ctx.client->Call("POST", "/v1/jobs/" + std::to_string(ctx.job_id) + "/update", &body);
  if (!r.ok()) return ReportError(ctx, r.status());
  if (ctx.json) {
    std::cout << r->dump(2) << "\n";
  } else {
    const json& req = (*r)["request"];
    std::cout << "job " << ctx.job_id << ": " << req.value("describe", "") << ", priority "
              << req.value("priority", "") << ", position " << r->value("queue_position", 0)
              << "\n";
  }
  return 0;
}

}  // namespace

std::vector<Command> JobCommands() {
  return {
      {"cancel",
       "End jobs: by id (cancel 3 4 5), or all of a user's (--user [NAME]), or yours in a state "
       "(--state queued) or of a name (--name NAME); root and the admin group may end any",
       SetupCancel, Cancel},
      {"show", "Everything about one job: request, times, GPUs, use, transitions, events",
       SetupShow, Show},
      {"hold", "Keep queued jobs from starting until released (Slurm's scontrol hold)", SetupIds,
       HoldCmd},
      {"release", "Let held jobs start again (an admin's hold: admins only)", SetupIds, ReleaseCmd},
      {"update",
       "Change a queued job: --mem, --compute, --priority, --after (Slurm's scontrol update)",
       SetupUpdate, Update},
  };
}

}  // namespace gpuslice::cli
