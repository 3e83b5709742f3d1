// `gpuslice service create|ls|scale|rm`: autoscaled services
// (docs/SERVICES.md), clients of /v1/services. The options of the
// subcommands live in this file's own state; `--json` works on each.

#include <iostream>

#include "cli/commands/commands.h"
#include "cli/view/table.h"

namespace gpuslice::cli {

using nlohmann::json;

namespace {

struct ServiceOptions {
  CLI::App* create = nullptr;
  CLI::App* ls = nullptr;
  CLI::App* scale = nullptr;
  CLI::App* rm = nullptr;
  std::string name;
  std::optional<std::string> replicas, target_util, scale_up_after, scale_down_after, cooldown;
  std::optional<uint32_t> count;
};

ServiceOptions& Options() {
  static ServiceOptions o;
  return o;
}

std::string Pct(const json& v) {
  if (!v.is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", v.get<double>());
  return buf;
}

void SetupService(CLI::App* sub, Context* ctx) {
  ServiceOptions& o = Options();
  sub->require_subcommand(1);

  o.create =
      sub->add_subcommand("create", "Keep MIN-MAX replicas of a command, scaled on their GPU use");
  CLI::App* c = o.create;
  c->add_flag("--json", ctx->json, "Machine-readable output");
  c->add_option("name", o.name, "The service's name")->required();
  c->add_option("--replicas", o.replicas, "How many replicas: MIN-MAX (1-4) or a count")
      ->required();
  c->add_option("--target-util", o.target_util,
                "Target mean GPU use of the replicas' slices (default 70%)");
  c->add_option("--scale-up-after", o.scale_up_after,
                "Add a replica after use stays above target this long (default 60s)");
  c->add_option("--scale-down-after", o.scale_down_after,
                "Remove one after use stays well below target this long (default 5m)");
  c->add_option("--cooldown", o.cooldown, "At least this long between changes (default 2m)");
  RequestOptions& r = ctx->request;
  c->add_option("--gpus", r.gpus, "Each replica: whole GPUs");
  c->add_option("--mem", r.mem,
                "Each replica: part of one GPU, its memory with a unit, e.g. 8GiB (GiB = 2^30 "
                "bytes; GB = 10^9)");
  c->add_option("--compute", r.compute, "With --mem: compute share, e.g. 30%");
  c->add_option("--mig", r.mig, "Each replica: a MIG instance of this profile");
  c->add_option("--priority", r.priority, "low, normal (default) or high");
  c->add_option("--max-runtime", r.max_runtime, "End (and replace) a replica after this long");
  c->add_option("--pool", r.pool, "Run the replicas on this pool's GPUs");
  c->add_option("--gpu-model", r.gpu_model,
                "Run the replicas only on GPUs of this model (or of one of a list: a100,h100)");
  c->add_option("--gres", r.gres, "Slurm's form: gpu:TYPE:COUNT, gpu:COUNT or gpu:TYPE");
  c->add_flag("--no-idle-reclaim", r.no_idle_reclaim,
              "Idle reclaim leaves the replicas alone (they wait for requests)");
  c->add_flag("--restartable", r.restartable,
              "A preempted replica waits in the queue again instead of ending");
  c->add_option("command", r.command, "The command every replica runs, after --")->required();

  o.ls = sub->add_subcommand("ls", "List services: replicas, range, target, use, last decision");
  o.ls->add_flag("--json", ctx->json, "Machine-readable output");

  o.scale = sub->add_subcommand("scale", "Set a service's replica count, or its range");
  o.scale->add_flag("--json", ctx->json, "Machine-readable output");
  o.scale->add_option("name", o.name, "The service")->required();
  o.scale->add_option("count", o.count, "Desired replicas (within the range)");
  o.scale->add_option("--replicas", o.replicas, "A new range MIN-MAX");

  o.rm = sub->add_subcommand("rm", "Remove a service: cancel its replicas");
  o.rm->add_flag("--json", ctx->json, "Machine-readable output");
  o.rm->add_option("name", o.name, "The service")->required();
}

std::string Members(const json& s) {
  std::string out;
  for (const json& m : s["members"]) {
    if (!out.empty()) out += " ";
    out += std::to_string(m["job"].get<uint64_t>());
  }
  return out.empty() ? "none" : out;
}

int Create(Context& ctx) {
  ServiceOptions& o = Options();
  if (core::Status s = CheckRequest(ctx.request); !s.ok()) return UsageError(ctx, s);
  json body = SubmitBody(ctx.request, "submit");
  body.erase("mode");
  body.erase("name");
  body["name"] = o.name;
  body["replicas"] = *o.replicas;
  auto put = [&](const char* key, const std::optional<std::string>& v) {
    if (v) body[key] = *v;
  };
  put("target_util", o.target_util);
  put("scale_up_after", o.scale_up_after);
  put("scale_down_after", o.scale_down_after);
  put("cooldown", o.cooldown);
  auto s = ctx.client->Call("POST", "/v1/services", &body);
  if (!s.ok()) return ReportError(ctx, s.status());
  if (ctx.json) {
    std::cout << s->dump(2) << "\n";
  } else {
    std::cout << "service " << (*s)["name"].get<std::string>() << ": "
              << (*s)["replicas"]["desired"].get<int>() << " replica(s) of "
              << (*s)["describe"].get<std::string>() << " (jobs " << Members(*s) << "), range "
              << (*s)["replicas"]["range"].get<std::string>() << ", target "
              << (*s)["target_util"].get<std::string>() << "\n";
  }
  return 0;
}

int List(Context& ctx) {
  auto r = ctx.client->Call("GET", "/v1/services");
  if (!r.ok()) return ReportError(ctx, r.status());
  if (ctx.json) {
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  Table t(
      {"NAME", "OWNER", "RUN/PEND/WANT", "RANGE", "TARGET", "UTIL", "REQUEST", "LAST DECISION"});
  int64_t now = NowMs();
  for (const json& s : (*r)["services"]) {
    const json& rep = s["replicas"];
    std::string counts = std::to_string(rep["running"].get<int>()) + "/" +
                         std::to_string(rep["pending"].get<int>()) + "/" +
                         std::to_string(rep["desired"].get<int>());
    if (rep.value("stopping", 0) > 0) {
      counts += " (" + std::to_string(rep["stopping"].get<int>()) + " stopping)";
    }
    std::string decision = "-";
    if (s["last_decision"].is_object()) {
      decision = FormatAge(now - s["last_decision"]["at_ms"].get<int64_t>()) +
                 " ago: " + s["last_decision"]["message"].get<std::string>();
    }
    if (s.value("crash_loop", false)) {
      decision = "CRASH LOOP (" + std::to_string(s["consecutive_failures"].get<int>()) +
                 " quick failures in a row); " + decision;
    }
    t.Add({s["name"], s["user"], counts, rep["range"], s["target_util"], Pct(s["mean_util_pct"]),
           s["describe"], decision});
  }
  std::cout << t.Render();
  return 0;
}

int Scale(Context& ctx) {
  ServiceOptions& o = Options();
  json body = json::object();
  if (o.count) body["desired"] = *o.count;
  if (o.replicas) body["replicas"] = *o.replicas;
  if (body.empty()) {
    std::cerr << "gpuslice: service scale: give a count (service scale NAME 3), a range "
                 "(--replicas 2-6), or both\n";
    return kExitUsage;
  }
  auto s = ctx.client->Call("POST", "/v1/services/" + o.name + "/scale", &body);
  if (!s.ok()) return ReportError(ctx, s.status());
  if (ctx.json) {
    std::cout << s->dump(2) << "\n";
  } else {
    std::cout << "service " << o.name << ": desired " << (*s)["replicas"]["desired"].get<int>()
              << " of " << (*s)["replicas"]["range"].get<std::string>() << "\n";
  }
  return 0;
}

int Remove(Context& ctx) {
  ServiceOptions& o = Options();
  auto r = ctx.client->Call("DELETE", "/v1/services/" + o.name);
  if (!r.ok()) return ReportError(ctx, r.status());
  if (ctx.json) {
    std::cout << r->dump(2) << "\n";
  } else {
    std::string jobs;
    for (const json& id : (*r)["cancelled"]) {
      jobs += (jobs.empty() ? "" : ", ") + std::to_string(id.get<uint64_t>());
    }
    std::cout << "service " << o.name << ": removed"
              << (jobs.empty() ? std::string() : "; cancelling job(s) " + jobs) << "\n";
  }
  return 0;
}

int RunService(Context& ctx) {
  ServiceOptions& o = Options();
  // Names come from the command line into a URL path: the daemon refuses any
  // other character, and so does the CLI before building the path.
  if ((o.scale->parsed() || o.rm->parsed()) &&
      o.name.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string::npos) {
    std::cerr << "gpuslice: bad service name '" << o.name << "'\n";
    return kExitUsage;
  }
  if (o.create->parsed()) return Create(ctx);
  if (o.ls->parsed()) return List(ctx);
  if (o.scale->parsed()) return Scale(ctx);
  if (o.rm->parsed()) return Remove(ctx);
  return kExitUsage;
}

}  // namespace

std::vector<Command> ServiceCommands() {
  return {{"service", "Autoscaled services: create, ls, scale, rm", SetupService, RunService}};
}

}  // namespace gpuslice::cli
