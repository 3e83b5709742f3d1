#include "daemon/api/api.h"

#include <algorithm>
#include <charconv>
#include <unordered_map>

#include "daemon/api/api_json.h"

namespace gpuslice::daemon {

using nlohmann::json;

namespace {

ApiResponse Json(int status, const json& j) { return {status, j.dump(), "application/json", {}}; }

ApiResponse Error(const core::Status& s) { return Json(HttpStatusOf(s.code()), ErrorJson(s)); }

bool ParseU64(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// Matches `path` against `pattern`; "{id}" takes a decimal id.
bool Match(std::string_view pattern, std::string_view path, uint64_t* id) {
  while (!pattern.empty() || !path.empty()) {
    size_t pe = pattern.find('/', 1), te = path.find('/', 1);
    std::string_view pseg = pattern.substr(0, pe), tseg = path.substr(0, te);
    if (pseg == "/{id}") {
      if (tseg.size() < 2 || !ParseU64(tseg.substr(1), id)) return false;
    } else if (pseg != tseg) {
      return false;
    }
    pattern = pe == std::string_view::npos ? std::string_view() : pattern.substr(pe);
    path = te == std::string_view::npos ? std::string_view() : path.substr(te);
  }
  return true;
}

// Matches `path` against an added route's pattern; "{x}" segments capture.
bool MatchNamed(std::string_view pattern, std::string_view path,
                std::map<std::string, std::string>* params) {
  while (!pattern.empty() || !path.empty()) {
    size_t pe = pattern.find('/', 1), te = path.find('/', 1);
    std::string_view pseg = pattern.substr(0, pe), tseg = path.substr(0, te);
    if (pseg.size() > 3 && pseg[1] == '{' && pseg.back() == '}') {
      if (tseg.size() < 2) return false;
      (*params)[std::string(pseg.substr(2, pseg.size() - 3))] = std::string(tseg.substr(1));
    } else if (pseg != tseg) {
      return false;
    }
    pattern = pe == std::string_view::npos ? std::string_view() : pattern.substr(pe);
    path = te == std::string_view::npos ? std::string_view() : path.substr(te);
  }
  return true;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

core::Result<std::string> Decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%') {
      if (i + 2 >= s.size()) {
        return core::InvalidArgumentError("bad percent-escape in query");
      }
      int hi = HexValue(s[i + 1]), lo = HexValue(s[i + 2]);
      if (hi < 0 || lo < 0) return core::InvalidArgumentError("bad percent-escape in query");
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The TCP token reads and cancels (docs/API.md); every other caller's rights
// are checked by the Service, per job.
bool InScope(const Caller& caller, RouteScope scope) {
  return !caller.token || scope == RouteScope::kRead || scope == RouteScope::kCancel;
}

ApiResponse OutOfScope(const ApiRequest& request) {
  return Error(core::PermissionDeniedError(
      "the TCP bearer token allows reads and cancels only, not " + request.method + " " +
      request.path + " (docs/API.md); use the unix socket as a local user or admin"));
}

}  // namespace

int HttpStatusOf(core::StatusCode code) {
  switch (code) {
    case core::StatusCode::kOk:
      return 200;
    case core::StatusCode::kInvalidArgument:
      return 400;
    case core::StatusCode::kOutOfRange:
      return 400;
    case core::StatusCode::kPermissionDenied:
      return 403;
    case core::StatusCode::kNotFound:
      return 404;
    case core::StatusCode::kAlreadyExists:
      return 409;
    case core::StatusCode::kFailedPrecondition:
      return 409;
    case core::StatusCode::kAborted:
      return 409;
    case core::StatusCode::kResourceExhausted:
      return 429;
    case core::StatusCode::kUnimplemented:
      return 501;
    case core::StatusCode::kUnavailable:
      return 503;
    case core::StatusCode::kDeadlineExceeded:
      return 504;
    case core::StatusCode::kInternal:
      return 500;
  }
  return 500;
}

core::Status ParseTarget(std::string_view target, std::string* path,
                         std::map<std::string, std::string>* query) {
  size_t q = target.find('?');
  *path = std::string(target.substr(0, q));
  if (path->empty() || (*path)[0] != '/') return core::InvalidArgumentError("bad request target");
  if (q == std::string_view::npos) return core::Status::Ok();
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    size_t amp = rest.find('&');
    std::string_view kv = rest.substr(0, amp);
    size_t eq = kv.find('=');
    GPUSLICE_ASSIGN_OR_RETURN(std::string key, Decode(kv.substr(0, eq)));
    std::string value;
    if (eq != std::string_view::npos) {
      GPUSLICE_ASSIGN_OR_RETURN(value, Decode(kv.substr(eq + 1)));
    }
    (*query)[key] = value;
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
  }
  return core::Status::Ok();
}

const Api::Route Api::kRoutes[] = {
    {"GET", "/v1/status", RouteScope::kRead, &Api::Status},
    {"GET", "/v1/gpus", RouteScope::kRead, &Api::Gpus},
    {"GET", "/v1/doctor", RouteScope::kRead, &Api::DoctorReport},
    {"GET", "/v1/jobs", RouteScope::kRead, &Api::ListJobs},
    {"GET", "/v1/jobs/summary", RouteScope::kRead, &Api::JobsSummary},
    {"POST", "/v1/jobs", RouteScope::kWrite, &Api::SubmitJob},
    {"GET", "/v1/jobs/{id}", RouteScope::kRead, &Api::GetJob},
    {"POST", "/v1/jobs/{id}/cancel", RouteScope::kCancel, &Api::CancelJob},
    {"GET", "/v1/jobs/{id}/logs", RouteScope::kRead, &Api::JobLogs},
    {"POST", "/v1/jobs/{id}/attach", RouteScope::kWrite, &Api::AttachJob},
    {"POST", "/v1/jobs/{id}/exit", RouteScope::kWrite, &Api::JobExit},
    {"GET", "/v1/events", RouteScope::kRead, &Api::ListEvents},
    {"POST", "/v1/jobs/{id}/resize", RouteScope::kWrite, &Api::ResizeJob},
    {"POST", "/v1/jobs/{id}/resume", RouteScope::kWrite, &Api::ResumeJob},
    {"POST", "/v1/jobs/{id}/suspend", RouteScope::kWrite, &Api::SuspendJob},
    {"POST", "/v1/jobs/{id}/move", RouteScope::kWrite, &Api::MoveJob},
    {"POST", "/v1/jobs/{id}/labels", RouteScope::kWrite, &Api::LabelJob},
    {"POST", "/v1/jobs/{id}/hold", RouteScope::kWrite, &Api::HoldJob},
    {"POST", "/v1/jobs/{id}/release", RouteScope::kWrite, &Api::ReleaseJob},
    {"POST", "/v1/jobs/{id}/update", RouteScope::kWrite, &Api::UpdateJob},
    {"GET", "/v1/jobs/{id}/container", RouteScope::kRead, &Api::JobContainer},
    {"GET", "/v1/quotas", RouteScope::kRead, &Api::ListQuotas},
    {"POST", "/v1/quotas", RouteScope::kWrite, &Api::SetQuota},
};

Api::Api(Service& service, Doctor& doctor) : service_(service), doctor_(doctor) {
  // Two named segments: the built-in table matches only "{id}".
  AddRoute("DELETE", "/v1/quotas/{scope}/{name}",
           [this](const ApiRequest& r) { return RemoveQuota(r); });
}

void Api::AddRoute(std::string method, std::string pattern, ExtraHandler handler) {
  RouteScope scope = method == "GET" ? RouteScope::kRead : RouteScope::kWrite;
  AddRoute(std::move(method), std::move(pattern), scope, std::move(handler));
}

void Api::AddRoute(std::string method, std::string pattern, RouteScope scope,
                   ExtraHandler handler) {
  extra_.push_back({std::move(method), std::move(pattern), scope, std::move(handler)});
}

std::vector<Api::RouteInfo> Api::Routes() const {
  std::vector<RouteInfo> out;
  for (const Route& r : kRoutes) out.push_back({r.method, r.pattern, r.scope});
  for (const ExtraRoute& r : extra_) out.push_back({r.method, r.pattern, r.scope});
  return out;
}

namespace {

// HEAD asks what GET would answer, without the body (HttpServer drops it).
bool MethodMatches(const std::string& asked, std::string_view route) {
  return asked == route || (asked == "HEAD" && route == "GET");
}

}  // namespace

ApiResponse Api::Handle(const ApiRequest& request) {
  bool path_known = false;
  for (const Route& r : kRoutes) {
    uint64_t id = 0;
    if (!Match(r.pattern, request.path, &id)) continue;
    path_known = true;
    if (!MethodMatches(request.method, r.method)) continue;
    if (!InScope(request.caller, r.scope)) return OutOfScope(request);
    return (this->*r.handler)(request, id);
  }
  for (const ExtraRoute& r : extra_) {
    std::map<std::string, std::string> params;
    if (!MatchNamed(r.pattern, request.path, &params)) continue;
    path_known = true;
    if (!MethodMatches(request.method, r.method)) continue;
    if (!InScope(request.caller, r.scope)) return OutOfScope(request);
    if (params.empty()) return r.handler(request);
    ApiRequest with = request;
    with.params = std::move(params);
    return r.handler(with);
  }
  if (path_known) {
    ApiResponse r = Error(
        core::InvalidArgumentError("method " + request.method + " not allowed on " + request.path));
    r.status = 405;
    return r;
  }
  return Error(core::NotFoundError("no route " + request.method + " " + request.path +
                                   " (see docs/API.md; routes start with /v1/)"));
}

ApiResponse Api::Status(const ApiRequest&, uint64_t) {
  const InventorySnapshot& inv = service_.inventory();
  json j = {{"state", service_.degraded_mode().degraded() ? "degraded" : "ok"},
            {"degraded_reason", service_.degraded_mode().reason()},
            {"job_tracking", service_.job_tracking()},
            {"version", "0.1.0"},
            {"gpu_source", inv.source},
            {"simulated", inv.simulated()},
            {"gpus", inv.gpus.size()},
            {"queued", service_.table().queued_count()},
            {"running", service_.table().running_count()}};
  return Json(200, j);
}

ApiResponse Api::Gpus(const ApiRequest&, uint64_t) {
  const InventorySnapshot& inv = service_.inventory();
  auto usage = service_.inventory_source().Usage();
  auto slices = service_.table().SlicesByGpu();
  // Whose each GPU process is (`gpuslice top`'s process rows): a running
  // job's, as its last sample found it, else outside gpuslice.
  std::unordered_map<uint32_t, std::pair<uint64_t, std::string>> whose;
  service_.table().ForEachLiveJob([&](const core::Job& job) {
    if (job.state != core::JobState::kRunning) return;
    if (auto u = service_.usage().Of(job.id)) {
      for (int32_t pid : u->pids) whose[static_cast<uint32_t>(pid)] = {job.id, job.user};
    }
  });
  for (const ForeignProcess& f : service_.foreign().processes()) {
    whose.try_emplace(f.pid, uint64_t{0}, f.user);
  }
  json gpus = json::array();
  for (const GpuInfo& g : inv.gpus) {
    json gj = GpuToJson(g);
    gj["pool"] = service_.pools().PoolOf(g.index);
    if (usage.ok()) {
      for (const GpuUsage& u : *usage) {
        if (u.index != g.index) continue;
        gj["memory_used"] = u.memory_used;
        // Left out where NVML gives no figure (MIG mode without GPM): a 0
        // there would read as idle.
        if (u.utilization_known) gj["utilization_pct"] = u.utilization_pct;
        gj["memory_util_pct"] = u.memory_util_pct;
        for (json& m : gj["mig"]) {
          const MigUsage* mu = MigUsageOf(u, m["gpu_instance_id"].get<uint32_t>());
          if (mu != nullptr && mu->known()) m["utilization_pct"] = mu->utilization_pct;
        }
        const std::string unhealthy = UnhealthyReason(u);
        gj["healthy"] = unhealthy.empty();
        if (!unhealthy.empty()) gj["health_reason"] = unhealthy;
        if (u.temperature_c >= 0) gj["temperature_c"] = u.temperature_c;
        if (u.power_mw > 0) gj["power_w"] = u.power_mw / 1000.0;
        json procs = json::array();
        for (const GpuProcess& p : u.processes) {
          json pj = {
              {"pid", p.pid}, {"used_memory", p.used_memory}, {"sm_util_pct", p.sm_util_pct}};
          if (auto w = whose.find(p.pid); w != whose.end()) {
            if (w->second.first != 0) pj["job"] = w->second.first;
            pj["user"] = w->second.second;
          }
          procs.push_back(std::move(pj));
        }
        gj["processes"] = procs;
      }
    }
    // Processes outside gpuslice (as of the last sample), with their owner.
    json foreign = json::array();
    uint64_t foreign_bytes = 0;
    for (const ForeignProcess& f : service_.foreign().processes()) {
      if (f.gpu_index != g.index) continue;
      json fj = {{"pid", f.pid},
                 {"user", f.user},
                 {"uid", f.uid},
                 {"used_memory", f.used_memory},
                 {"spared", f.spared}};
      if (!f.mig_uuid.empty()) fj["mig_uuid"] = f.mig_uuid;
      foreign.push_back(fj);
      foreign_bytes += f.used_memory;
    }
    gj["foreign_processes"] = foreign;
    gj["foreign_memory"] = foreign_bytes;
    // A MIG instance with foreign processes is taken in placement: it says
    // by whom, as it says which job holds it.
    for (json& m : gj["mig"]) {
      json mine = json::array();
      uint64_t bytes = 0;
      for (const json& fj : foreign) {
        if (fj.value("mig_uuid", std::string()) != m["uuid"].get<std::string>()) continue;
        mine.push_back(
            {{"pid", fj["pid"]}, {"user", fj["user"]}, {"used_memory", fj["used_memory"]}});
        bytes += fj["used_memory"].get<uint64_t>();
      }
      m["foreign_processes"] = mine;
      m["foreign_memory"] = bytes;
    }
    json sl = json::array();
    for (uint64_t id : slices[g.index]) {
      auto v = service_.reads().Get(id);
      if (!v.ok()) continue;
      const core::Job& job = v->job;
      json s = {{"job", id},
                {"user", job.user},
                {"name", job.request.name},
                {"memory_limit", job.allocation.memory_bytes_per_gpu},
                {"compute_milli", job.allocation.compute_milli}};
      if (!job.region_path.empty()) {
        auto u = service_.regions().Usage(job.region_path);
        if (u.ok()) {
          for (const SliceUsage& su : *u) {
            if (su.uuid == g.uuid || (g.mig_enabled)) s["memory_used"] = su.used_bytes;
          }
        }
      }
      sl.push_back(s);
      // A MIG instance says whose it is, so its owner shows in the listing.
      for (json& m : gj["mig"]) {
        const auto& uuids = job.allocation.gpu_uuids;
        if (std::find(uuids.begin(), uuids.end(), m["uuid"].get<std::string>()) != uuids.end()) {
          m["job"] = id;
          m["user"] = job.user;
          m["name"] = job.request.name;
        }
      }
    }
    gj["slices"] = sl;
    gpus.push_back(gj);
  }
  json j = {{"source", inv.source},
            {"simulated", inv.simulated()},
            {"library", inv.library},
            {"driver_version", inv.driver_version},
            {"nvml_version", inv.nvml_version},
            {"cuda_driver_version", inv.cuda_driver_version},
            {"gpus", gpus}};
  if (!usage.ok()) j["usage_error"] = usage.status().message();
  return Json(200, j);
}

ApiResponse Api::DoctorReport(const ApiRequest&, uint64_t) { return Json(200, doctor_.Run()); }

ApiResponse Api::ListEvents(const ApiRequest& req, uint64_t) {
  EventQuery q;
  uint64_t v = 0;
  if (auto it = req.query.find("since_ms"); it != req.query.end()) {
    if (!ParseU64(it->second, &v)) {
      return Error(core::InvalidArgumentError("since_ms: not a number: '" + it->second + "'"));
    }
    q.since_ms = static_cast<int64_t>(v);
  }
  if (auto it = req.query.find("job"); it != req.query.end()) {
    if (!ParseU64(it->second, &q.job_id)) {
      return Error(core::InvalidArgumentError("job: not a job id: '" + it->second + "'"));
    }
  }
  if (auto it = req.query.find("limit"); it != req.query.end()) {
    if (!ParseU64(it->second, &v) || v == 0 || v > 10000) {
      return Error(core::InvalidArgumentError("limit: expected 1-10000, got '" + it->second + "'"));
    }
    q.limit = v;
  }
  auto events = service_.events().Query(q);
  if (!events.ok()) return Error(events.status());
  json out = json::array();
  for (Event& e : *events) {
    e.message = service_.reads().PublicText(e.job_id, std::move(e.message));
    out.push_back(EventToJson(e));
  }
  return Json(200, {{"events", out}});
}

ApiResponse Api::ListJobs(const ApiRequest& req, uint64_t) {
  auto query = ParseJobQuery(req.query);
  if (!query.ok()) return Error(query.status());
  JobPage page = service_.reads().Query(*query);
  json jobs = json::array();
  for (const JobView& v : page.jobs) jobs.push_back(JobToJson(v));
  json out = {{"jobs", std::move(jobs)},
              {"degraded", service_.degraded_mode().degraded()},
              {"degraded_reason", service_.degraded_mode().reason()}};
  if (page.next_cursor) out["next_cursor"] = std::to_string(*page.next_cursor);
  return Json(200, out);
}

ApiResponse Api::JobsSummary(const ApiRequest& req, uint64_t) {
  if (req.query.count("cursor")) {
    return Error(
        core::InvalidArgumentError("cursor: a summary has no pages (its limit counts groups)"));
  }
  auto query = ParseJobQuery(req.query);
  if (!query.ok()) return Error(query.status());
  JobSummary summary = service_.reads().Summary(*query);
  json groups = json::array();
  for (size_t i = 0; i < summary.groups.size(); ++i) {
    const JobGroup& g = summary.groups[i];
    json gj = {{"ids", FormatIdRanges(g.ids)},
               {"first_id", g.ids.front()},
               {"count", g.ids.size()},
               {"state", core::JobStateName(g.state)},
               {"user", g.user},
               {"name", g.DisplayName()},
               {"request", g.request},
               {"priority", g.priority},
               {"pool", g.pool},
               {"held", g.held}};
    const JobView& first = summary.first[i];
    if (g.state == core::JobState::kQueued) {
      gj["queue_position"] = first.queue_position;
      gj["waiting_for"] = first.waiting_for;
    }
    groups.push_back(std::move(gj));
  }
  return Json(200, {{"counts", summary.counts},
                    {"groups", std::move(groups)},
                    {"groups_total", summary.groups_total},
                    {"degraded", service_.degraded_mode().degraded()},
                    {"degraded_reason", service_.degraded_mode().reason()}});
}

ApiResponse Api::SubmitJob(const ApiRequest& req, uint64_t) {
  auto spec = ParseSubmitBody(req.body);
  if (!spec.ok()) return Error(spec.status());
  auto v = service_.intake().Submit(req.caller, std::move(*spec));
  if (!v.ok()) return Error(v.status());
  return Json(201, JobToJson(*v));
}

ApiResponse Api::GetJob(const ApiRequest& req, uint64_t id) {
  auto v = service_.reads().Get(id);
  if (!v.ok()) return Error(v.status());
  json j = JobToJson(*v);
  auto history = service_.reads().History(id);
  if (history.ok()) {
    json h = json::array();
    for (Transition t : *history) {
      t.reason = RedactEnvironment(std::move(t.reason), v->job.env, v->job.user);
      h.push_back(TransitionToJson(t));
    }
    j["transitions"] = h;
  }
  // The owner of a running shell job gets the environment to start it with;
  // nobody else, not even root, an admin or the TCP token: the environment
  // holds the owner's secrets. So does the owner of an external
  // job (a Slurm step's slurmstepd puts it into the step's tasks).
  const core::Job& job = v->job;
  bool owner = req.caller.local && !req.caller.token && req.caller.uid == job.uid;
  if (owner && (job.mode == core::JobMode::kShell || job.mode == core::JobMode::kExternal) &&
      job.state == core::JobState::kRunning) {
    j["env"] = service_.setup().JobEnvironment(job);
  }
  return Json(200, j);
}

ApiResponse Api::CancelJob(const ApiRequest& req, uint64_t id) {
  // An optional {"exit_code": N}: how an external job's work ended.
  std::optional<int> exit_code;
  if (!req.body.empty()) {
    auto code = ParseIntField(req.body, "exit_code", 255 + 128);
    if (!code.ok()) return Error(code.status());
    exit_code = static_cast<int>(*code);
  }
  core::Status s = service_.Cancel(req.caller, id, exit_code);
  if (!s.ok()) return Error(s);
  auto v = service_.reads().Get(id);
  return Json(200, v.ok() ? JobToJson(*v) : json{{"id", id}});
}

ApiResponse Api::JobLogs(const ApiRequest& req, uint64_t id) {
  std::string stream = "stdout";
  uint64_t offset = 0, limit = 1 << 20;
  if (auto it = req.query.find("stream"); it != req.query.end()) stream = it->second;
  if (auto it = req.query.find("offset"); it != req.query.end() && !ParseU64(it->second, &offset)) {
    return Error(core::InvalidArgumentError("offset: not a number: '" + it->second + "'"));
  }
  if (auto it = req.query.find("limit"); it != req.query.end() && !ParseU64(it->second, &limit)) {
    return Error(core::InvalidArgumentError("limit: not a number: '" + it->second + "'"));
  }
  auto chunk = service_.reads().ReadLog(req.caller, id, stream, offset, limit);
  if (!chunk.ok()) return Error(chunk.status());
  ApiResponse r{200, std::move(chunk->data), "application/octet-stream", {}};
  r.headers.push_back({"X-Gpuslice-Next-Offset", std::to_string(chunk->next_offset)});
  r.headers.push_back({"X-Gpuslice-Job-State", std::string(core::JobStateName(chunk->state))});
  r.headers.push_back({"X-Gpuslice-Exit-Code", std::to_string(chunk->exit_code)});
  return r;
}

ApiResponse Api::AttachJob(const ApiRequest& req, uint64_t id) {
  auto pid = ParseIntField(req.body, "pid", 1 << 30);
  if (!pid.ok()) return Error(pid.status());
  core::Status s = service_.shells().Attach(req.caller, id, *pid);
  if (!s.ok()) return Error(s);
  return Json(200, {{"id", id}, {"pid", *pid}});
}

ApiResponse Api::JobExit(const ApiRequest& req, uint64_t id) {
  auto code = ParseIntField(req.body, "exit_code", 255 + 128);
  if (!code.ok()) return Error(code.status());
  core::Status s = service_.shells().ReportExit(req.caller, id, static_cast<int>(*code));
  if (!s.ok()) return Error(s);
  return Json(200, {{"id", id}});
}

ApiResponse Api::ResizeJob(const ApiRequest& req, uint64_t id) {
  auto spec = ParseResizeBody(req.body);
  if (!spec.ok()) return Error(spec.status());
  auto v = service_.live().Resize(req.caller, id, *spec);
  if (!v.ok()) return Error(v.status());
  return Json(200, JobToJson(*v));
}

ApiResponse Api::ListQuotas(const ApiRequest&, uint64_t) {
  json out = json::array();
  for (const QuotaView& q : service_.quotas().Quotas()) out.push_back(QuotaToJson(q));
  return Json(200, {{"quotas", out}});
}

ApiResponse Api::SetQuota(const ApiRequest& req, uint64_t) {
  auto parsed = ParseQuotaBody(req.body);
  if (!parsed.ok()) return Error(parsed.status());
  auto quota = core::BuildQuota(parsed->second);
  if (!quota.ok()) return Error(quota.status());
  if (auto s = service_.quotas().SetQuota(req.caller, parsed->first, *quota); !s.ok())
    return Error(s);
  for (const QuotaView& q : service_.quotas().Quotas()) {
    if (q.who == parsed->first) return Json(200, QuotaToJson(q));
  }
  return Error(core::InternalError("quota set but not listed"));
}

ApiResponse Api::RemoveQuota(const ApiRequest& req) {
  core::Principal who;
  auto kind = core::ParsePrincipalKind(req.params.at("scope"));
  if (!kind.ok()) return Error(kind.status());
  who.kind = *kind;
  who.name = req.params.at("name");
  if (auto s = ValidatePrincipalName(who.name); !s.ok()) return Error(s);
  if (auto s = service_.quotas().RemoveQuota(req.caller, who); !s.ok()) return Error(s);
  return Json(
      200, {{"scope", core::PrincipalKindName(who.kind)}, {"name", who.name}, {"removed", true}});
}

ApiResponse Api::ResumeJob(const ApiRequest& req, uint64_t id) {
  if (auto s = service_.live().Resume(req.caller, id); !s.ok()) return Error(s);
  auto v = service_.reads().Get(id);
  if (!v.ok()) return Error(v.status());
  // A suspended job is being restored by a worker (flag "resuming").
  return Json(v->job.state == core::JobState::kSuspended ? 202 : 200, JobToJson(*v));
}

ApiResponse Api::SuspendJob(const ApiRequest& req, uint64_t id) {
  if (auto s = service_.live().Suspend(req.caller, id); !s.ok()) return Error(s);
  auto v = service_.reads().Get(id);
  if (!v.ok()) return Error(v.status());
  // Accepted: the worker suspends it; the job's flags say "suspending" until
  // it is `suspended` (or has a checkpoint_error).
  return Json(202, JobToJson(*v));
}

ApiResponse Api::MoveJob(const ApiRequest& req, uint64_t id) {
  auto gpu = ParseSingleFieldBody(req.body, "gpu", "{\"gpu\": \"GPU-...\"}");
  if (!gpu.ok()) return Error(gpu.status());
  if (!gpu->is_string() || gpu->get<std::string>().empty()) {
    return Error(core::InvalidArgumentError("gpu: must be the UUID of the GPU to move to"));
  }
  if (auto s = service_.live().Move(req.caller, id, gpu->get<std::string>()); !s.ok()) {
    return Error(s);
  }
  auto v = service_.reads().Get(id);
  if (!v.ok()) return Error(v.status());
  // Accepted: suspended, then resumed on the target by the worker (flags
  // "suspending", then "resuming").
  return Json(202, JobToJson(*v));
}

ApiResponse Api::LabelJob(const ApiRequest& req, uint64_t id) {
  auto given = ParseSingleFieldBody(req.body, "labels", "{\"labels\": {...}}");
  if (!given.ok()) return Error(given.status());
  auto labels = ParseLabels(*given);
  if (!labels.ok()) return Error(labels.status());
  auto v = service_.edits().SetLabels(req.caller, id, std::move(*labels));
  if (!v.ok()) return Error(v.status());
  return Json(200, JobToJson(*v));
}

ApiResponse Api::HoldJob(const ApiRequest& req, uint64_t id) {
  auto v = service_.edits().Hold(req.caller, id);
  if (!v.ok()) return Error(v.status());
  return Json(200, JobToJson(*v));
}

ApiResponse Api::ReleaseJob(const ApiRequest& req, uint64_t id) {
  auto v = service_.edits().Release(req.caller, id);
  if (!v.ok()) return Error(v.status());
  return Json(200, JobToJson(*v));
}

ApiResponse Api::UpdateJob(const ApiRequest& req, uint64_t id) {
  auto spec = ParseUpdateBody(req.body);
  if (!spec.ok()) return Error(spec.status());
  auto v = service_.edits().Update(req.caller, id, *spec);
  if (!v.ok()) return Error(v.status());
  return Json(200, JobToJson(*v));
}

// What a container joining the running job's slice gets (docs/CONTAINERS.md):
// its CDI device name, and the same as device nodes, mounts and environment
// for engines without CDI (Docker 20.10).
ApiResponse Api::JobContainer(const ApiRequest& req, uint64_t id) {
  auto c = service_.setup().ContainerOf(req.caller, id);
  if (!c.ok()) return Error(c.status());
  json mounts = json::array();
  for (const CdiMount& m : c->mounts) {
    mounts.push_back({{"host_path", m.host_path},
                      {"container_path", m.container_path},
                      {"read_only", m.read_only}});
  }
  // Under the job's cgroup, a container's processes are the job's (ended
  // with it, accounted to it); engines take it as --cgroup-parent.
  return Json(200, {{"job", id},
                    {"cdi_device", std::string(kCdiKind) + "=" + std::to_string(id)},
                    {"device_nodes", c->device_nodes},
                    {"mounts", mounts},
                    {"env", c->env},
                    {"cgroup_parent", service_.setup().CgroupParentOf(id)},
                    {"additional_gids", c->additional_gids}});
}

}  // namespace gpuslice::daemon
