#include "cli/commands/commands.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>

#include "cli/parse/job_select.h"
#include "cli/view/ps_view.h"
#include "cli/view/table.h"
#include "core/jobs/dependency.h"
#include "core/jobs/job.h"
#include "core/strings.h"
#include "core/units.h"
#include "slurm/slurm_doctor.h"

extern char** environ;

namespace gpuslice::cli {

using nlohmann::json;

std::string CurrentUser() {
  struct passwd* pw = getpwuid(getuid());
  return pw != nullptr ? pw->pw_name : std::to_string(getuid());
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

void AddRequestOptions(CLI::App* sub, Context* ctx, bool with_command) {
  RequestOptions& r = ctx->request;
  sub->add_option("--gpus", r.gpus, "Whole GPUs: a count (2) or a range (1-4)");
  sub->add_option("--mem", r.mem,
                  "Part of one GPU: its memory with a unit, e.g. 8GiB (GiB = 2^30 bytes; GB = "
                  "10^9)");
  sub->add_option("--compute", r.compute, "With --mem: compute share, e.g. 30%");
  sub->add_option("--compute-mode", r.compute_mode,
                  "With --compute: hard (default; never above the share) or work-conserving "
                  "(uses time other slices leave idle)");
  sub->add_option("--mig", r.mig, "A MIG instance of this profile, e.g. 1g.10gb");
  sub->add_option("--priority", r.priority, "low, normal (default) or high");
  sub->add_option("--name", r.name, "A name to show in ps");
  sub->add_option("--max-runtime", r.max_runtime, "End the job after this long, e.g. 2h");
  sub->add_option("--pool", r.pool, "Run on this pool's GPUs (default: the default pool)");
  sub->add_option("--gpu-model", r.gpu_model,
                  "Only GPUs of this model, or of one of a list: a100, h100-80gb, a100,h100 (see "
                  "`gpuslice gpus`)");
  sub->add_option("--gres", r.gres,
                  "Slurm's form: gpu:TYPE:COUNT (gpu:a100:2 = --gpus 2 --gpu-model a100), "
                  "gpu:COUNT or gpu:TYPE");
  sub->add_flag("--no-idle-reclaim", r.no_idle_reclaim,
                "Idle reclaim leaves this job alone (a service idle between requests)");
  if (with_command) {
    sub->add_option("--cpus", r.cpus,
                    "Host CPU time the job may use, in CPUs (0.5, 2), like docker run --cpus");
    sub->add_option("--host-mem", r.host_mem,
                    "Host memory the job may use, e.g. 4GiB (the kernel ends it past this), like "
                    "docker run --memory");
  }
  if (with_command) {
    sub->add_option("--image", r.image,
                    "Run the command in a container of this image, a plain reference "
                    "(name[:tag][@digest]) of one already in the engine's store (never pulled), "
                    "as you, with this directory mounted at the same path "
                    "(docs/CONTAINERS.md)");
    sub->add_option("--engine", r.engine, "With --image: podman (default) or docker");
  }
  if (with_command) {
    sub->add_flag("--restartable", r.restartable,
                  "If preempted, queue it again (it restarts from the beginning)");
    sub->add_flag("--grow", r.grow,
                  "With --gpus MIN-MAX: take GPUs that become idle while it runs (the job gets "
                  "SIGUSR1 on each change and must catch it; docs/DAEMON.md)");
  }
  if (with_command) {
    sub->add_option("command", r.command, "The command, after --")->required();
  }
}

void SetupNone(CLI::App*, Context*) {}

// Per-command state of submit and ps.
struct SubmitOptions {
  std::optional<std::string> array;
  std::vector<std::string> after;  // Each --after given: "12", "3,4:ok".
} g_submit;
struct PsOptions {
  std::optional<std::string> user, state, pool, format;
  std::vector<std::string> names;
  CLI::Option* user_flag = nullptr;  // Given, with or without a name.
  size_t limit = kDefaultPsLimit;
  bool summary = false;
} g_ps;

void SetupSubmit(CLI::App* sub, Context* ctx) {
  AddRequestOptions(sub, ctx, true);
  sub->add_option("--array", g_submit.array,
                  "A job array: one job per index (1-20, 0,3,5), each with GPUSLICE_ARRAY_INDEX "
                  "set and NAME[index] as its name");
  sub->add_option("--after", g_submit.after,
                  "Start only once these jobs have ended: --after 12 (however it ended), "
                  "--after 12:ok (only if it exited 0; else this job is cancelled); a comma list "
                  "or repeated, all must hold, e.g. --after 3,4:ok --after 5")
      ->allow_extra_args(false);
}
void SetupRun(CLI::App* sub, Context* ctx) {
  AddRequestOptions(sub, ctx, true);
  sub->add_flag("-i,--interactive", ctx->request.interactive,
                "Run the command here, attached to this terminal (its stdin, a tty, Ctrl-C), "
                "once the daemon has granted the slice; not with --restartable");
}
void SetupShell(CLI::App* sub, Context* ctx) { AddRequestOptions(sub, ctx, false); }

void SetupId(CLI::App* sub, Context* ctx) {
  sub->add_option("id", ctx->job_id, "Job id")->required();
}

void SetupPs(CLI::App* sub, Context* ctx) {
  sub->add_flag("-a,--all", ctx->all, "Include finished jobs");
  g_ps.user_flag = sub->add_option("-u,--user", g_ps.user, "Only this user's jobs (default: yours)")
                       ->expected(0, 1);
  sub->add_option("--state", g_ps.state,
                  "Only jobs in these states: queued, running, suspended, exited, cancelled, "
                  "timed_out, failed, ended (the last four), comma-separated");
  sub->add_option("--name", g_ps.names,
                  "Only jobs of this name (an array's name: all its members; * matches any "
                  "characters); repeat or comma-separate for several")
      ->delimiter(',');
  sub->add_option("--pool", g_ps.pool, "Only jobs of this pool");
  sub->add_option("-n,--limit", g_ps.limit,
                  "Show at most N jobs, the oldest first (default 100; 0: all of them)");
  sub->add_option("-o,--format", g_ps.format,
                  "Columns to show: comma-separated fields, each with an optional maximum "
                  "width (id,user,name:20,state,note); fields: " +
                      core::Join(PsFieldNames(), ", "));
  sub->add_flag("--summary", g_ps.summary,
                "Counts by state and one line per group of alike jobs (the members of an array, "
                "identical waiting jobs), like squeue's array summary");
}

void SetupLogs(CLI::App* sub, Context* ctx) {
  SetupId(sub, ctx);
  sub->add_flag("-f,--follow", ctx->follow, "Keep printing until the job ends");
}

int Run(Context& ctx) { return RunJob(ctx, "run"); }

int Submit(Context& ctx) {
  if (core::Status s = CheckRequest(ctx.request); !s.ok()) return UsageError(ctx, s);
  std::string after;  // Canonical ("3,4:ok,5"), checked here as the daemon checks it.
  if (!g_submit.after.empty()) {
    std::string given;
    for (const std::string& a : g_submit.after) given += (given.empty() ? "" : ",") + a;
    auto deps = core::ParseDependencies(given);
    if (!deps.ok()) return UsageError(ctx, deps.status());
    after = core::FormatDependencies(*deps);
  }
  std::vector<std::optional<uint32_t>> indices = {std::nullopt};
  if (g_submit.array) {
    auto a = ParseArrayIndices(*g_submit.array);
    if (!a.ok()) return UsageError(ctx, a.status());
    indices.assign(a->begin(), a->end());
  }
  json jobs = json::array();
  for (const std::optional<uint32_t>& index : indices) {
    RequestOptions r = ctx.request;
    if (index) r.name = r.name.value_or("") + "[" + std::to_string(*index) + "]";
    json body = SubmitBody(r, "submit");
    if (!after.empty()) body["after"] = after;  // Every member of an array.
    if (index) body["env"].push_back("GPUSLICE_ARRAY_INDEX=" + std::to_string(*index));
    auto job = ctx.client->Call("POST", "/v1/jobs", &body);
    if (!job.ok()) {
      // The jobs already submitted stay: say which they are.
      if (!jobs.empty() && !ctx.json) {
        std::cerr << "gpuslice: submitted before the error:";
        for (const json& j : jobs) std::cerr << " " << j["id"].get<uint64_t>();
        std::cerr << "\n";
      }
      return ReportError(ctx, job.status());
    }
    jobs.push_back(*job);
    if (!ctx.json) std::cout << (*job)["id"].get<uint64_t>() << "\n";
  }
  if (ctx.json) std::cout << (g_submit.array ? json{{"jobs", jobs}} : jobs[0]).dump(2) << "\n";
  return 0;
}

int Shell(Context& ctx) { return ShellJob(ctx); }

int Ps(Context& ctx) {
  // The daemon filters and pages (docs/API.md): with 10,000 jobs queued a
  // page costs its own jobs, not the queue.
  JobFilter filter;
  if (g_ps.user_flag->count() > 0) {
    filter.user = g_ps.user && !g_ps.user->empty() ? *g_ps.user : CurrentUser();
  }
  if (g_ps.state) {
    auto st = ParseStates(*g_ps.state);
    if (!st.ok()) return UsageError(ctx, st.status());
    filter.states = *st;
  }
  filter.names = g_ps.names;
  filter.pool = g_ps.pool;
  filter.finished = ctx.all || WantsEndedJobs(filter.states);
  filter.limit = g_ps.limit;
  std::optional<std::vector<PsColumn>> columns;
  if (g_ps.format) {
    if (g_ps.summary) {
      return UsageError(
          ctx, core::InvalidArgumentError("--format chooses the columns of the job list; not with "
                                          "--summary"));
    }
    auto c = ParsePsFormat(*g_ps.format);
    if (!c.ok()) return UsageError(ctx, c.status());
    columns = std::move(*c);
  }
  auto list =
      ctx.client->Call("GET", JobsTarget(g_ps.summary ? "/v1/jobs/summary" : "/v1/jobs", filter));
  if (!list.ok()) return ReportError(ctx, list.status());
  if (ctx.json) {
    std::cout << list->dump(2) << "\n";
    return 0;
  }
  if ((*list).value("degraded", false)) {
    std::cerr << "gpuslice: daemon DEGRADED: " << Shown((*list).value("degraded_reason", ""))
              << "\n";
  }
  if (g_ps.summary) {
    std::cout << RenderSummary(*list);
    return 0;
  }
  std::cout << (columns ? RenderPs(*list, NowMs(), *columns) : RenderPs(*list, NowMs()));
  if (list->contains("next_cursor")) {
    // On stderr: what scripts read from stdout stays the table.
    std::cerr << "gpuslice: the first " << filter.limit
              << " jobs shown; more match (-n 0 shows all, --summary counts them)\n";
  }
  return 0;
}

int Logs(Context& ctx) {
  int code = 0;
  return FollowLogs(ctx, ctx.job_id, ctx.follow, false, &code);
}

int Gpus(Context& ctx) {
  auto r = ctx.client->Call("GET", "/v1/gpus");
  if (!r.ok()) return ReportError(ctx, r.status());
  if (ctx.json) {
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  const json& g = *r;
  if (g.value("simulated", false)) {
    std::cout << "SIMULATED GPUs (no NVIDIA driver found; " << g.value("library", "") << ")\n";
  }
  std::cout << "Driver " << g.value("driver_version", "?") << "   NVML "
            << g.value("nvml_version", "?") << "   CUDA "
            << g.value("cuda_driver_version", 0) / 1000 << "."
            << (g.value("cuda_driver_version", 0) % 1000) / 10 << "\n";
  Table t({"GPU", "NAME", "UUID", "POOL", "MEMORY", "RESERVED", "UTIL", "SMs", "ISLAND",
           "SLICES"});
  Table s({"GPU", "JOB", "USER", "NAME", "MEM LIMIT", "MEM USED", "COMPUTE"});
  // GPU processes that belong to no job: their memory is charged to the GPU
  // when jobs are placed, so they explain a job that waits.
  Table f({"GPU", "PID", "USER", "MEMORY"});
  size_t foreign = 0;
  for (const json& gpu : g["gpus"]) {
    for (const json& p : gpu.value("foreign_processes", json::array())) {
      ++foreign;
      // On a GPU in MIG mode, the instance it runs in (and takes from jobs).
      std::string where = std::to_string(gpu["index"].get<int>());
      for (const json& m : gpu.value("mig", json::array())) {
        if (p.value("mig_uuid", std::string()) == m.value("uuid", std::string("-"))) {
          where += " MIG " + m.value("profile", std::string("?"));
        }
      }
      f.Add({where, std::to_string(p.value("pid", 0u)), p.value("user", std::string("?")),
             core::FormatBytes(p.value("used_memory", uint64_t{0}))});
    }
    // MEMORY is what NVML says processes use; RESERVED what jobs were given
    // (what placement counts: what is left is free for jobs).
    const uint64_t total = gpu.value("memory_total", uint64_t{0});
    std::string mem = core::FormatBytes(gpu.value("memory_used", uint64_t{0})) + " / " +
                      core::FormatBytes(total);
    uint64_t reserved = 0;
    for (const json& sl : gpu["slices"]) reserved += sl.value("memory_limit", uint64_t{0});
    reserved = std::min(reserved, total);
    bool mig = gpu.value("mig_enabled", false);
    std::string held = mig ? "MIG" : core::FormatBytes(reserved) + " (" +
                                         core::FormatBytes(total - reserved) + " free)";
    int island = gpu.value("island", -1);
    t.Add({std::to_string(gpu["index"].get<int>()), gpu["model"], gpu["uuid"],
           gpu.value("pool", std::string("-")), mem, held,
           gpu.contains("utilization_pct")
               ? std::to_string(gpu["utilization_pct"].get<int>()) + "%"
               : "n/a",
           gpu.value("sm_count", 0) ? std::to_string(gpu["sm_count"].get<int>()) : "-",
           island < 0 ? "-" : std::to_string(island) + " " + gpu.value("link", ""),
           std::to_string(gpu["slices"].size())});
    for (const json& sl : gpu["slices"]) {
      uint32_t milli = sl.value("compute_milli", 0u);
      s.Add(
          {std::to_string(gpu["index"].get<int>()), std::to_string(sl["job"].get<uint64_t>()),
           sl["user"], sl.value("name", ""),
           core::FormatBytes(sl.value("memory_limit", uint64_t{0})),
           sl.contains("memory_used") ? core::FormatBytes(sl["memory_used"].get<uint64_t>()) : "-",
           milli ? core::FormatShareMilli(milli) : "-"});
    }
    if (mig) {
      // Each MIG instance: free, or whose (a job's, or taken by a process
      // outside gpuslice).
      for (const json& m : gpu["mig"]) {
        std::string whose = m.contains("job") ? "job " + std::to_string(m["job"].get<uint64_t>()) +
                                                    " (" + m.value("user", "") + ")"
                                              : "free";
        const json outside = m.value("foreign_processes", json::array());
        if (!outside.empty()) {
          std::string pid = std::to_string(outside[0].value("pid", 0u));
          whose = (m.contains("job") ? whose + "; " : "") + "outside gpuslice (pid " + pid + ")";
        }
        const std::string util =
            m.contains("utilization_pct")
                ? std::to_string(std::lround(m["utilization_pct"].get<double>())) + "%"
                : "n/a";
        t.Add({"  mig", m.value("profile", ""), m["uuid"], "",
               core::FormatBytes(m.value("memory_total", uint64_t{0})), whose, util, "", "", ""});
      }
    }
  }
  std::cout << t.Render();
  std::cout << "\nSlices:\n" << s.Render();
  if (foreign > 0) {
    std::cout << "\nProcesses outside gpuslice (charged to their GPU, or MIG instance, in "
                 "placement):\n"
              << f.Render();
  }
  return 0;
}

// On a Slurm node, the Slurm checks join the daemon's (the daemon links no
// integration): they judge the socket this CLI reached the daemon at, and
// the GPUs the daemon has.
void AddSlurmChecks(Context& ctx, json& doctor) {
  std::map<uint32_t, std::string> minors;
  auto gpus = ctx.client->Call("GET", "/v1/gpus");
  if (gpus.ok()) {
    for (const json& g : (*gpus)["gpus"]) {
      const int64_t minor = g.value("minor", int64_t{-1});
      if (minor >= 0) minors[static_cast<uint32_t>(minor)] = g.value("uuid", "");
    }
  }
  for (json& c : slurm::SlurmDoctorChecks(ctx.client->socket_path(), minors)) {
    if (!c.value("note", false) && !c.value("ok", false)) doctor["ok"] = false;
    doctor["checks"].push_back(std::move(c));
  }
}

int Doctor(Context& ctx) {
  auto r = ctx.client->Call("GET", "/v1/doctor");
  if (!r.ok()) return ReportError(ctx, r.status());
  AddSlurmChecks(ctx, *r);
  if (ctx.json) {
    std::cout << r->dump(2) << "\n";
  } else {
    std::cout << "daemon: reachable at " << ctx.client->socket_path() << "\n";
    for (const json& c : (*r)["checks"]) {
      const char* mark = c.value("note", false) ? "  note  " : c["ok"].get<bool>() ? "  ok    "
                                                                                  : "  FAIL  ";
      std::cout << mark << Shown(c["name"].get<std::string>()) << ": "
                << Shown(c["detail"].get<std::string>()) << "\n";
    }
  }
  return (*r)["ok"].get<bool>() ? 0 : 1;
}

int StatusCmd(Context& ctx) {
  auto r = ctx.client->Call("GET", "/v1/status");
  if (!r.ok()) return ReportError(ctx, r.status());
  if (ctx.json) {
    std::cout << r->dump(2) << "\n";
  } else {
    const json& s = *r;
    std::cout << "gpusliced " << s["version"].get<std::string>() << ": "
              << s["state"].get<std::string>();
    if (s["state"] != "ok") {
      std::cout << " (" << Shown(s["degraded_reason"].get<std::string>()) << ")";
    }
    std::cout << "\n  GPUs: " << s["gpus"].get<int>()
              << (s["simulated"].get<bool>() ? " (simulated)" : "")
              << "\n  running: " << s["running"].get<int>()
              << "\n  queued: " << s["queued"].get<int>() << "\n";
    if (s.contains("job_tracking")) {
      std::cout << "  job tracking: " << s["job_tracking"].get<std::string>() << "\n";
    }
  }
  return 0;
}

}  // namespace

int ReportError(const Context& ctx, const core::Status& status) {
  if (ctx.json) {
    json j = {
        {"error", {{"code", core::StatusCodeName(status.code())}, {"message", status.message()}}}};
    std::cerr << j.dump() << "\n";
  } else {
    // The daemon's messages quote what was asked (a name, an image, a
    // label), which may be another user's text.
    std::cerr << "gpuslice: " << Shown(status.message()) << "\n";
  }
  return kExitDaemonError;
}

int UsageError(const Context& ctx, const core::Status& status) {
  (void)ReportError(ctx, status);
  return kExitUsage;
}

namespace {

// `--gres` as `--gpus` and `--gpu-model` (which it may not be given with).
core::Status ApplyGres(const RequestOptions& r, core::RequestFields* f) {
  if (!r.gres) return core::Status::Ok();
  if (r.gpus || r.mem || r.mig) {
    return core::InvalidArgumentError(
        "--gres asks for whole GPUs: not with --gpus, --mem or --mig");
  }
  auto g = core::ParseGres(*r.gres);
  if (!g.ok()) return g.status().WithContext("--gres");
  f->gpus = g->gpus;
  if (g->model) {
    if (r.gpu_model) {
      return core::InvalidArgumentError("--gres " + *r.gres +
                                        " names a GPU model already: not with --gpu-model");
    }
    f->gpu_model = g->model;
  }
  return core::Status::Ok();
}

}  // namespace

core::Status CheckRequest(const RequestOptions& r) {
  core::RequestFields f;
  f.gpus = r.gpus;
  f.mem = r.mem;
  f.compute = r.compute;
  f.compute_mode = r.compute_mode;
  f.mig = r.mig;
  f.priority = r.priority;
  f.name = r.name;
  f.max_runtime = r.max_runtime;
  f.pool = r.pool;
  f.gpu_model = r.gpu_model;
  GPUSLICE_RETURN_IF_ERROR(ApplyGres(r, &f));
  GPUSLICE_ASSIGN_OR_RETURN(core::ResourceRequest request, core::BuildRequest(f));
  if (r.grow && (request.kind != core::RequestKind::kWholeGpus ||
                 request.gpus_max == request.gpus_min)) {
    return core::InvalidArgumentError(
        "--grow goes with a range of whole GPUs (--gpus MIN-MAX): only such jobs can grow");
  }
  if (r.engine && !r.image) return core::InvalidArgumentError("--engine goes with --image");
  if (r.image && r.interactive) {
    return core::InvalidArgumentError(
        "--image: a container job is started by the daemon; not with -i (use "
        "`podman run -it $(gpuslice container-args ID)` to attach to a running job's slice)");
  }
  return core::Status::Ok();
}

json SubmitBody(const RequestOptions& r, const std::string& mode) {
  json body = {{"mode", mode}};
  auto put = [&](const char* key, const std::optional<std::string>& v) {
    if (v) body[key] = *v;
  };
  put("gpus", r.gpus);
  put("mem", r.mem);
  put("compute", r.compute);
  put("compute_mode", r.compute_mode);
  put("mig", r.mig);
  put("priority", r.priority);
  put("name", r.name);
  put("max_runtime", r.max_runtime);
  put("pool", r.pool);
  put("cpus", r.cpus);
  put("host_mem", r.host_mem);
  put("image", r.image);
  put("engine", r.engine);
  put("gpu_model", r.gpu_model);
  if (core::RequestFields gres; r.gres && ApplyGres(r, &gres).ok()) {
    put("gpus", gres.gpus);
    put("gpu_model", gres.gpu_model);
  }
  if (r.restartable) body["restartable"] = true;
  if (r.no_idle_reclaim) body["no_idle_reclaim"] = true;
  body["argv"] = r.command;
  char cwd[4096];
  body["cwd"] = getcwd(cwd, sizeof cwd) ? std::string(cwd) : std::string("/");
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  // The daemon grows only the elastic jobs that carry this (docs/DAEMON.md).
  if (r.grow) env.emplace_back("GPUSLICE_ELASTIC_GROW=1");
  body["env"] = env;
  return body;
}

const std::vector<Command>& Commands() {
  static const std::vector<Command> kCommands = [] {
    std::vector<Command> all = {
        {"run", "Run a command in a slice; stream its output; exit with its exit code", SetupRun,
         Run},
        {"submit", "Run a command in a slice, detached; print its job id", SetupSubmit, Submit},
        {"shell", "Open an interactive shell in a slice", SetupShell, Shell},
        {"ps", "List jobs (queued ones with their position and why they wait)", SetupPs, Ps},
        {"logs", "Print a job's output", SetupLogs, Logs},
        {"gpus", "The GPUs and the slices on each", SetupNone, Gpus},
        {"doctor", "Check driver, CUDA, NVML and the shim", SetupNone, Doctor},
        {"status", "The daemon's state", SetupNone, StatusCmd},
    };
    // Commands that live in their own files.
    for (const auto& more : {JobCommands(), EventCommands(), PolicyCommands(), MonitorCommands(),
                             ServiceCommands(), ContainerCommands()}) {
      all.insert(all.end(), more.begin(), more.end());
    }
    return all;
  }();
  return kCommands;
}

}  // namespace gpuslice::cli
