// The CLI's policy commands (see commands.h): quotas, live resize, suspend
// and resume. Each command keeps its option state in this file.

#include <chrono>
#include <iostream>
#include <thread>

#include "cli/commands/commands.h"
#include "cli/view/table.h"
#include "core/schedule/quota.h"
#include "core/units.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

struct QuotaOptions {
  CLI::App* set = nullptr;
  CLI::App* ls = nullptr;
  CLI::App* rm = nullptr;
  std::string user, group;
  std::optional<std::string> mem, gpus, compute, jobs;
} g_quota;

struct ResizeOptions {
  std::optional<std::string> mem, compute, gpus, priority;
  bool force = false;
} g_resize;

void AddPrincipal(CLI::App* sub) {
  auto* u = sub->add_option("--user", g_quota.user, "A user's quota");
  auto* g =
      sub->add_option("--group", g_quota.group, "A group's quota (every member's jobs together)");
  u->excludes(g);
}

void SetupQuota(CLI::App* sub, Context* ctx) {
  sub->require_subcommand(1);
  g_quota.set = sub->add_subcommand("set", "Set a user's or group's quota (admins only)");
  AddPrincipal(g_quota.set);
  g_quota.set->add_option("--mem", g_quota.mem,
                          "GPU memory over all running jobs, with a unit, e.g. 20GiB (GiB = 2^30 "
                          "bytes; GB = 10^9)");
  g_quota.set->add_option("--gpus", g_quota.gpus, "Whole GPUs at once");
  g_quota.set->add_option("--compute", g_quota.compute,
                          "Sum of compute shares, e.g. 150% (100% = one GPU)");
  g_quota.set->add_option("--jobs", g_quota.jobs, "Running jobs at once");
  g_quota.ls = sub->add_subcommand("ls", "The quotas and what each principal holds now");
  g_quota.rm = sub->add_subcommand("rm", "Remove a user's or group's quota (admins only)");
  AddPrincipal(g_quota.rm);
  for (CLI::App* leaf : {g_quota.set, g_quota.ls, g_quota.rm}) {
    leaf->add_flag("--json", ctx->json, "Machine-readable output");
  }
}

core::Result<json> PrincipalBody() {
  if (g_quota.user.empty() == g_quota.group.empty()) {
    return core::InvalidArgumentError("name exactly one of --user or --group");
  }
  return json{{"scope", g_quota.user.empty() ? "group" : "user"},
              {"name", g_quota.user.empty() ? g_quota.group : g_quota.user}};
}

std::string UseOf(const json& q, const char* limit_key, const char* used_key, bool bytes,
                  bool share) {
  if (!q.contains(limit_key)) return "-";
  uint64_t limit = q[limit_key].get<uint64_t>();
  uint64_t used = q["in_use"].value(used_key, uint64_t{0});
  auto fmt = [&](uint64_t v) {
    if (bytes) return core::FormatBytes(v);
    if (share) return core::FormatShareMilli(static_cast<uint32_t>(v));
    return std::to_string(v);
  };
  return fmt(used) + " / " + fmt(limit);
}

int Quota(Context& ctx) {
  if (g_quota.ls->parsed()) {
    auto r = ctx.client->Call("GET", "/v1/quotas");
    if (!r.ok()) return ReportError(ctx, r.status());
    if (ctx.json) {
      std::cout << r->dump(2) << "\n";
      return 0;
    }
    Table t({"SCOPE", "NAME", "MEMORY", "GPUS", "COMPUTE", "JOBS"});
    for (const json& q : (*r)["quotas"]) {
      t.Add({q["scope"], q["name"], UseOf(q, "memory_bytes", "memory_bytes", true, false),
             UseOf(q, "gpus", "gpus", false, false),
             UseOf(q, "compute_milli", "compute_milli", false, true),
             UseOf(q, "jobs", "jobs", false, false)});
    }
    std::cout << t.Render();
    return 0;
  }
  auto who = PrincipalBody();
  if (!who.ok()) return UsageError(ctx, who.status());
  if (g_quota.rm->parsed()) {
    std::string target = "/v1/quotas/" + (*who)["scope"].get<std::string>() + "/" +
                         (*who)["name"].get<std::string>();
    auto r = ctx.client->Call("DELETE", target);
    if (!r.ok()) return ReportError(ctx, r.status());
    if (ctx.json) {
      std::cout << r->dump(2) << "\n";
    } else {
      std::cout << "quota of " << (*who)["scope"].get<std::string>() << " "
                << (*who)["name"].get<std::string>() << " removed\n";
    }
    return 0;
  }
  core::QuotaFields fields;
  fields.mem = g_quota.mem;
  fields.gpus = g_quota.gpus;
  fields.compute = g_quota.compute;
  fields.jobs = g_quota.jobs;
  if (auto q = core::BuildQuota(fields); !q.ok()) return UsageError(ctx, q.status());
  json body = *who;
  auto put = [&](const char* key, const std::optional<std::string>& v) {
    if (v) body[key] = *v;
  };
  put("mem", g_quota.mem);
  put("gpus", g_quota.gpus);
  put("compute", g_quota.compute);
  put("jobs", g_quota.jobs);
  auto r = ctx.client->Call("POST", "/v1/quotas", &body);
  if (!r.ok()) return ReportError(ctx, r.status());
  if (ctx.json) {
    std::cout << r->dump(2) << "\n";
  } else {
    std::cout << (*r)["scope"].get<std::string>() << " " << (*r)["name"].get<std::string>() << ": "
              << (*r)["describe"].get<std::string>() << "\n";
  }
  return 0;
}

void SetupResize(CLI::App* sub, Context* ctx) {
  sub->add_option("id", ctx->job_id, "Job id")->required();
  sub->add_option("--mem", g_resize.mem,
                  "New memory limit with a unit, e.g. 12GiB (GiB = 2^30 bytes; GB = 10^9)");
  sub->add_option("--compute", g_resize.compute, "New compute share, e.g. 50%");
  sub->add_option("--gpus", g_resize.gpus,
                  "An elastic job (--gpus MIN-MAX): run on this many GPUs, within its range");
  sub->add_option("--priority", g_resize.priority,
                  "New priority: low, normal or high (its turns on the GPU follow at once)");
  sub->add_flag("--force", g_resize.force,
                "Apply a memory limit below what the job uses now (its new allocations fail "
                "until its use falls under it)");
}

int Resize(Context& ctx) {
  if (g_resize.mem) {
    if (auto b = core::ParseMemorySize(*g_resize.mem); !b.ok()) {
      return UsageError(ctx, b.status().WithContext("--mem"));
    }
  }
  if (g_resize.compute) {
    if (auto m = core::ParseShareMilli(*g_resize.compute); !m.ok()) {
      return UsageError(ctx, m.status().WithContext("--compute"));
    }
  }
  if (g_resize.priority) {
    if (auto p = core::ParsePriority(*g_resize.priority); !p.ok()) {
      return UsageError(ctx, p.status().WithContext("--priority"));
    }
  }
  json body = json::object();
  if (g_resize.priority) body["priority"] = *g_resize.priority;
  if (g_resize.mem) body["mem"] = *g_resize.mem;
  if (g_resize.compute) body["compute"] = *g_resize.compute;
  if (g_resize.gpus) body["gpus"] = *g_resize.gpus;
  if (g_resize.force) body["force"] = true;
  auto r = ctx.client->Call("POST", "/v1/jobs/" + std::to_string(ctx.job_id) + "/resize", &body);
  if (!r.ok()) return ReportError(ctx, r.status());
  if (ctx.json) {
    std::cout << r->dump(2) << "\n";
  } else {
    std::cout << "job " << ctx.job_id << ": " << (*r)["request"].value("describe", "?") << ", "
              << (*r)["request"].value("priority", "?") << " priority\n";
  }
  return 0;
}

struct CheckpointOptions {
  bool no_wait = false;
  std::string gpu;  // move
} g_checkpoint;

void SetupResume(CLI::App* sub, Context* ctx) {
  sub->add_option("id", ctx->job_id, "Job id")->required();
  sub->add_flag("--no-wait", g_checkpoint.no_wait,
                "Return once the daemon accepted it, not when the job is back");
}

void SetupSuspend(CLI::App* sub, Context* ctx) {
  sub->add_option("id", ctx->job_id, "Job id")->required();
  sub->add_flag("--no-wait", g_checkpoint.no_wait,
                "Return once the daemon accepted it, not when the job is suspended");
}

void SetupMove(CLI::App* sub, Context* ctx) {
  sub->add_option("id", ctx->job_id, "Job id")->required();
  sub->add_option("--gpu", g_checkpoint.gpu, "UUID of the GPU (or MIG instance) to move it to")
      ->required();
  sub->add_flag("--no-wait", g_checkpoint.no_wait,
                "Return once the daemon accepted it, not when the job runs on the new GPU");
}

bool HasFlag(const json& job, const char* flag) {
  if (!job.contains("flags") || !job["flags"].is_array()) return false;
  for (const json& f : job["flags"]) {
    if (f.is_string() && f.get<std::string>() == flag) return true;
  }
  return false;
}

// Polls the job until the daemon's worker is done with it (the flag
// `busy_flag` gone); returns the job as it is then.
core::Result<json> WaitWhile(Context& ctx, json job, const char* busy_flag,
                             const char* then_flag = nullptr) {
  const std::string path = "/v1/jobs/" + std::to_string(ctx.job_id);
  auto delay = std::chrono::milliseconds(20);
  while (HasFlag(job, busy_flag) || (then_flag != nullptr && HasFlag(job, then_flag))) {
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(200));
    auto r = ctx.client->Call("GET", path);
    if (!r.ok()) return r.status();
    job = std::move(*r);
  }
  return job;
}

// Suspend and resume of a suspended job: the daemon accepts at once and
// works on a thread; by default the CLI waits and reports the outcome.
int Checkpoint(Context& ctx, bool resume) {
  const std::string id = std::to_string(ctx.job_id);
  auto r = ctx.client->Call("POST", "/v1/jobs/" + id + (resume ? "/resume" : "/suspend"));
  if (!r.ok()) return ReportError(ctx, r.status());
  json job = std::move(*r);
  const char* busy = resume ? "resuming" : "suspending";
  if (resume && !HasFlag(job, busy) && job.value("state", "") != "suspended") {
    // A job paused by idle reclaim: launches are allowed again at once.
    if (ctx.json) {
      std::cout << job.dump(2) << "\n";
    } else {
      std::cout << "job " << id << ": may launch GPU work again\n";
    }
    return 0;
  }
  if (!g_checkpoint.no_wait) {
    auto done = WaitWhile(ctx, std::move(job), busy);
    if (!done.ok()) return ReportError(ctx, done.status());
    job = std::move(*done);
  }
  if (ctx.json) {
    std::cout << job.dump(2) << "\n";
  } else if (HasFlag(job, busy)) {
    std::cout << "job " << id << ": " << busy << " (see `gpuslice show " << id << "`)\n";
  } else if (job.contains("checkpoint_error")) {
    std::cerr << "gpuslice: job " << id << ": " << Shown(job["checkpoint_error"].get<std::string>())
              << "\n";
    return 1;
  } else if (resume) {
    std::cout << "job " << id << " resumed: running again on "
              << (job.contains("allocation") ? job["allocation"]["gpu_uuids"].dump() : "its GPUs")
              << "\n";
  } else {
    std::cout << "job " << id
              << " suspended: its GPU memory is in host memory and its GPUs are free; "
                 "`gpuslice resume "
              << id << "` brings it back\n";
  }
  return 0;
}

// A move: suspended, then resumed on the target; by default the CLI waits
// for both and says where the job runs.
int Move(Context& ctx) {
  const std::string id = std::to_string(ctx.job_id);
  const json body = {{"gpu", g_checkpoint.gpu}};
  auto r = ctx.client->Call("POST", "/v1/jobs/" + id + "/move", &body);
  if (!r.ok()) return ReportError(ctx, r.status());
  json job = std::move(*r);
  if (!g_checkpoint.no_wait) {
    auto done = WaitWhile(ctx, std::move(job), "suspending", "resuming");
    if (!done.ok()) return ReportError(ctx, done.status());
    job = std::move(*done);
  }
  if (ctx.json) {
    std::cout << job.dump(2) << "\n";
    return job.contains("checkpoint_error") ? 1 : 0;
  }
  if (HasFlag(job, "suspending") || HasFlag(job, "resuming")) {
    std::cout << "job " << id << ": moving to " << g_checkpoint.gpu << " (see `gpuslice show " << id
              << "`)\n";
    return 0;
  }
  if (job.contains("checkpoint_error")) {
    std::cerr << "gpuslice: job " << id << ": " << Shown(job["checkpoint_error"].get<std::string>())
              << " (it is " << job.value("state", "?") << ")\n";
    return 1;
  }
  std::cout << "job " << id << " moved: running on "
            << (job.contains("allocation") ? job["allocation"]["gpu_uuids"].dump() : "?") << "\n";
  return 0;
}

int Resume(Context& ctx) { return Checkpoint(ctx, /*resume=*/true); }
int Suspend(Context& ctx) { return Checkpoint(ctx, /*resume=*/false); }

}  // namespace

std::vector<Command> PolicyCommands() {
  return {
      {"quota", "Quotas per user and group: set, ls, rm", SetupQuota, Quota},
      {"resize", "Change a running job's memory limit, compute share or priority at once",
       SetupResize, Resize},
      {"suspend", "Suspend a running job: its GPU memory to host memory, its GPUs free for others",
       SetupSuspend, Suspend},
      {"resume", "Resume a suspended job, or let a job paused by idle reclaim launch again",
       SetupResume, Resume},
      {"move", "Move a single-GPU job to another GPU (suspended there, resumed here)", SetupMove,
       Move},
  };
}

}  // namespace gpuslice::cli
