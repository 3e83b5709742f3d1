#include "daemon/api/api_json.h"

#include "core/jobs/dependency.h"
#include "daemon/launch/container_job.h"

namespace gpuslice::daemon {

using nlohmann::json;

namespace {

core::Result<std::string> GetString(const json& j, const char* field) {
  const json& v = j.at(field);
  if (!v.is_string()) return core::InvalidArgumentError(std::string(field) + ": must be a string");
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() > kMaxStringBytes) {
    return core::InvalidArgumentError(std::string(field) + ": longer than " +
                                      std::to_string(kMaxStringBytes) + " bytes");
  }
  if (s.find('\0') != std::string::npos) {
    return core::InvalidArgumentError(std::string(field) + ": contains a NUL byte");
  }
  return s;
}

core::Result<std::vector<std::string>> GetStrings(const json& j, const char* field, size_t max) {
  const json& v = j.at(field);
  if (!v.is_array()) {
    return core::InvalidArgumentError(std::string(field) + ": must be an array of strings");
  }
  if (v.size() > max) {
    return core::InvalidArgumentError(std::string(field) + ": more than " + std::to_string(max) +
                                      " entries");
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) {
      return core::InvalidArgumentError(std::string(field) + "[" + std::to_string(i) +
                                        "]: must be a string");
    }
    const std::string& s = v[i].get_ref<const std::string&>();
    if (s.size() > kMaxStringBytes) {
      return core::InvalidArgumentError(std::string(field) + "[" + std::to_string(i) +
                                        "]: longer than " + std::to_string(kMaxStringBytes) +
                                        " bytes");
    }
    if (s.find('\0') != std::string::npos) {
      return core::InvalidArgumentError(std::string(field) + "[" + std::to_string(i) +
                                        "]: contains a NUL byte");
    }
    out.push_back(s);
  }
  return out;
}

// An optional request field given as a string or (for sizes) an integer.
core::Status OptionalField(const json& j, const char* field, bool integer_ok,
                           std::optional<std::string>* out) {
  if (!j.contains(field) || j.at(field).is_null()) return core::Status::Ok();
  const json& v = j.at(field);
  if (integer_ok && v.is_number_unsigned()) {
    *out = std::to_string(v.get<uint64_t>());
    return core::Status::Ok();
  }
  if (integer_ok && v.is_number_integer()) {
    return core::InvalidArgumentError(std::string(field) + ": must not be negative");
  }
  GPUSLICE_ASSIGN_OR_RETURN(*out, GetString(j, field));
  return core::Status::Ok();
}

// A memory size: a string ("8GiB") or an integer count of bytes, which is
// passed on as "<n>B" so that the unit-less string form stays refused.
core::Status OptionalSize(const json& j, const char* field, std::optional<std::string>* out) {
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, field, true, out));
  if (*out && j.at(field).is_number_unsigned()) **out += "B";
  return core::Status::Ok();
}

}  // namespace

core::Result<std::map<std::string, std::string>> ParseLabels(const json& v) {
  if (!v.is_object()) return core::InvalidArgumentError("labels: must be an object of strings");
  std::map<std::string, std::string> labels;
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string()) {
      return core::InvalidArgumentError("labels: the value of '" + key.substr(0, 64) +
                                        "' must be a string");
    }
    labels[key] = value.get<std::string>();
  }
  GPUSLICE_RETURN_IF_ERROR(core::ValidateLabels(labels));
  return labels;
}

core::Result<json> ParseSingleFieldBody(std::string_view body, const std::string& field,
                                        const std::string& shape) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return core::InvalidArgumentError("body must be a JSON object " + shape);
  }
  for (const auto& [key, value] : j.items()) {
    if (key != field)
      return core::InvalidArgumentError("unknown field '" + key.substr(0, 64) + "'");
  }
  if (!j.contains(field)) return core::InvalidArgumentError(field + ": missing");
  return j.at(field);
}

core::Result<SubmitSpec> ParseSubmitBody(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return core::InvalidArgumentError("body is not valid JSON");
  if (!j.is_object()) return core::InvalidArgumentError("body must be a JSON object");
  static const char* const kKnown[] = {"gpus",
                                       "mem",
                                       "compute",
                                       "mig",
                                       "priority",
                                       "name",
                                       "max_runtime",
                                       "mode",
                                       "argv",
                                       "cwd",
                                       "env",
                                       "pool",
                                       "restartable",
                                       "compute_mode",
                                       "cpus",
                                       "host_mem",
                                       "after",
                                       "image",
                                       "engine",
                                       "labels",
                                       "paused",
                                       "gpu_uuids",
                                       "bound_to_caller",
                                       "gpu_model",
                                       "no_idle_reclaim"};
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    if (!known) return core::InvalidArgumentError("unknown field '" + key.substr(0, 64) + "'");
  }
  SubmitSpec spec;
  core::RequestFields& f = spec.fields;
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "gpus", true, &f.gpus));
  GPUSLICE_RETURN_IF_ERROR(OptionalSize(j, "mem", &f.mem));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "compute", false, &f.compute));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "compute_mode", false, &f.compute_mode));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "mig", false, &f.mig));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "priority", false, &f.priority));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "name", false, &f.name));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "max_runtime", false, &f.max_runtime));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "pool", false, &f.pool));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "cpus", true, &f.cpus));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "host_mem", true, &f.host_mem));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "gpu_model", false, &f.gpu_model));
  std::optional<std::string> after;  // "12,13:ok", or one job id as an integer.
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "after", true, &after));
  if (after) {
    GPUSLICE_ASSIGN_OR_RETURN(spec.after, core::ParseDependencies(*after));
  }
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "image", false, &spec.image));
  // At parsing, so that every entry (jobs, services' templates) refuses a
  // name that is not a plain reference before anything is stored.
  if (spec.image) GPUSLICE_RETURN_IF_ERROR(ValidateImageName(*spec.image));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "engine", false, &spec.engine));
  if (j.contains("restartable")) {
    if (!j["restartable"].is_boolean()) {
      return core::InvalidArgumentError("restartable: must be true or false");
    }
    spec.restartable = j["restartable"].get<bool>();
  }
  if (j.contains("no_idle_reclaim")) {
    if (!j["no_idle_reclaim"].is_boolean()) {
      return core::InvalidArgumentError("no_idle_reclaim: must be true or false");
    }
    spec.no_idle_reclaim = j["no_idle_reclaim"].get<bool>();
  }
  if (j.contains("mode")) {
    GPUSLICE_ASSIGN_OR_RETURN(std::string mode, GetString(j, "mode"));
    GPUSLICE_ASSIGN_OR_RETURN(spec.mode, core::ParseJobMode(mode));
  }
  if (j.contains("argv")) {
    GPUSLICE_ASSIGN_OR_RETURN(spec.argv, GetStrings(j, "argv", kMaxArgs));
  }
  if (j.contains("labels")) {
    GPUSLICE_ASSIGN_OR_RETURN(spec.labels, ParseLabels(j.at("labels")));
  }
  if (j.contains("paused")) {
    if (!j["paused"].is_boolean())
      return core::InvalidArgumentError("paused: must be true or false");
    spec.paused = j["paused"].get<bool>();
  }
  if (j.contains("bound_to_caller")) {
    if (!j["bound_to_caller"].is_boolean()) {
      return core::InvalidArgumentError("bound_to_caller: must be true or false");
    }
    spec.bound_to_caller = j["bound_to_caller"].get<bool>();
  }
  if (j.contains("gpu_uuids")) {
    GPUSLICE_ASSIGN_OR_RETURN(spec.gpu_uuids, GetStrings(j, "gpu_uuids", kMaxGpuUuids));
  }
  // An external job runs nothing, so it has no working directory.
  if (j.contains("cwd") || spec.mode != core::JobMode::kExternal) {
    if (!j.contains("cwd")) return core::InvalidArgumentError("cwd: missing");
    GPUSLICE_ASSIGN_OR_RETURN(spec.cwd, GetString(j, "cwd"));
  }
  if (j.contains("env")) {
    GPUSLICE_ASSIGN_OR_RETURN(spec.env, GetStrings(j, "env", kMaxEnv));
  }
  return spec;
}

core::Result<int64_t> ParseIntField(std::string_view body, const char* field, int64_t max) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return core::InvalidArgumentError("body must be a JSON object");
  }
  if (!j.contains(field)) return core::InvalidArgumentError(std::string(field) + ": missing");
  const json& v = j.at(field);
  if (!v.is_number_integer()) {
    return core::InvalidArgumentError(std::string(field) + ": must be an integer");
  }
  int64_t n = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                  ? -1
                  : v.get<int64_t>();
  if (n < 0 || n > max) {
    return core::InvalidArgumentError(std::string(field) + ": must be 0 to " + std::to_string(max));
  }
  return n;
}

json JobToJson(const JobView& v) {
  const core::Job& j = v.job;
  const core::ResourceRequest& r = j.request;
  json request = {{"kind", core::RequestKindName(r.kind)},
                  {"describe", r.Describe()},
                  {"priority", core::PriorityName(r.priority)}};
  if (r.kind == core::RequestKind::kWholeGpus) {
    request["gpus"] = r.gpus_min;
  } else if (r.kind == core::RequestKind::kFraction) {
    request["memory_bytes"] = r.memory_bytes;
    request["compute_milli"] = r.compute_milli;
    request["compute_mode"] = core::ComputeModeName(r.compute_mode);
  } else {
    request["mig"] = r.mig.ToString();
  }
  if (r.max_runtime) request["max_runtime_ms"] = r.max_runtime->count();
  if (!r.pool.empty()) request["pool"] = r.pool;
  if (r.host_cpu_milli) request["host_cpu_milli"] = r.host_cpu_milli;
  if (r.host_memory_bytes) request["host_memory_bytes"] = r.host_memory_bytes;
  if (!r.gpu_models.empty()) request["gpu_model"] = core::FormatGpuModels(r.gpu_models);
  json out = {{"id", j.id},
              {"name", r.name},
              {"user", j.user},
              {"uid", j.uid},
              {"state", core::JobStateName(j.state)},
              {"mode", core::JobModeName(j.mode)},
              {"request", request},
              {"argv", j.argv},
              {"cwd", j.cwd},
              {"submitted_ms", j.submitted_ms},
              {"started_ms", j.started_ms},
              {"ended_ms", j.ended_ms},
              {"exit_code", j.exit_code},
              {"reason", RedactEnvironment(j.reason, j.env, j.user)},
              {"pid", j.pid}};
  if (j.holder_pid != 0) out["holder_pid"] = j.holder_pid;
  if (!j.allocation.empty()) {
    out["allocation"] = {{"gpu_indices", j.allocation.gpu_indices},
                         {"gpu_uuids", j.allocation.gpu_uuids},
                         {"memory_bytes_per_gpu", j.allocation.memory_bytes_per_gpu},
                         {"compute_milli", j.allocation.compute_milli}};
  }
  if (!j.region_path.empty()) out["slice"] = j.region_path;
  out["labels"] = j.labels;
  if (!j.image.empty()) {
    out["image"] = j.image;
    out["engine"] = j.engine;
  }
  // Queued, or suspended and waiting in the queue to resume on demand.
  if (j.state == core::JobState::kQueued || v.queue_position > 0) {
    out["queue_position"] = v.queue_position;
    out["waiting_for"] = v.waiting_for;
  }
  if (v.usage) out["usage"] = UsageToJson(*v.usage);
  out["restartable"] = j.restartable;
  if (j.no_idle_reclaim) out["no_idle_reclaim"] = true;
  if (v.fair_share >= 0) out["fair_share"] = v.fair_share;
  if (v.expected_start_ms) out["expected_start_ms"] = *v.expected_start_ms;
  if (j.state == core::JobState::kRunning || j.state == core::JobState::kSuspended) {
    out["flags"] = v.flags;
  }
  out["idle_ms"] = j.idle_ms;
  // Time suspended so far, the current suspension included.
  if (j.suspended_total_ms != 0 || j.suspended_since_ms != 0) {
    out["suspended_ms"] = j.suspended_total_ms;
    if (j.suspended_since_ms != 0) out["suspended_since_ms"] = j.suspended_since_ms;
  }
  if (!v.checkpoint_error.empty()) out["checkpoint_error"] = v.checkpoint_error;
  if (j.hold != core::HoldKind::kNone) out["hold"] = core::HoldKindName(j.hold);
  if (!v.after.empty()) {
    json after = json::array();
    for (const DependencyView& d : v.after) {
      json e = {{"job", d.dep.job_id},
                {"condition", d.dep.kind == core::DependencyKind::kOk ? "ok" : "any"}};
      if (d.state) {
        e["state"] = core::JobStateName(*d.state);
        if (*d.state == core::JobState::kExited) e["exit_code"] = d.exit_code;
        switch (core::Evaluate(d.dep, *d.state, d.exit_code)) {
          case core::DependencyStatus::kWaiting:
            e["status"] = "waiting";
            break;
          case core::DependencyStatus::kSatisfied:
            e["status"] = "satisfied";
            break;
          case core::DependencyStatus::kBroken:
            e["status"] = "broken";
            break;
        }
      }
      after.push_back(std::move(e));
    }
    out["after"] = std::move(after);
  }
  return out;
}

json UsageToJson(const JobUsage& u) {
  json out = {{"sampled_ms", u.sampled_ms},
              {"memory_used_bytes", u.memory_used_bytes},
              {"memory_limit_bytes", u.memory_limit_bytes},
              {"memory_peak_bytes", u.memory_peak_bytes},
              {"nvml_memory_bytes", u.nvml_memory_bytes},
              {"refused_allocs", u.refused_allocs},
              {"throttled_ms", u.throttled_ns / 1'000'000},
              {"low_use_ms", u.low_use_ms},
              {"idle_ms_total", u.idle_ms_total},
              {"pids", u.pids}};
  // Left out where NVML gives no figure (a MIG job on a GPU without GPM).
  if (u.gpu_util_known) out["gpu_util_pct"] = u.gpu_util_pct;
  return out;
}

json EventToJson(const Event& e) {
  return {{"id", e.id},      {"at_ms", e.at_ms}, {"kind", e.kind},
          {"job", e.job_id}, {"user", e.user},   {"message", e.message}};
}

json TransitionToJson(const Transition& t) {
  return {{"from", t.from}, {"to", t.to}, {"at_ms", t.at_ms}, {"reason", t.reason}};
}

json GpuToJson(const GpuInfo& g) {
  json out = {{"index", g.index},       {"uuid", g.uuid},
              {"model", g.model},       {"memory_total", g.memory_total},
              {"sm_count", g.sm_count}, {"pci_bus_id", g.pci_bus_id},
              {"minor", g.minor},       {"island", g.island},
              {"link", g.link},         {"mig_enabled", g.mig_enabled}};
  json mig = json::array();
  for (const MigInstance& m : g.mig) {
    mig.push_back({{"uuid", m.uuid},
                   {"profile", m.profile},
                   {"memory_total", m.memory_total},
                   {"gpu_instance_id", m.gpu_instance_id},
                   {"compute_instance_id", m.compute_instance_id}});
  }
  out["mig"] = mig;
  return out;
}

json ErrorJson(const core::Status& s) {
  return {{"error", {{"code", core::StatusCodeName(s.code())}, {"message", s.message()}}}};
}

core::Status ValidatePrincipalName(std::string_view name) {
  if (name.empty() || name.size() > 64) {
    return core::InvalidArgumentError("name: a user or group name of 1-64 characters");
  }
  for (char c : name) {
    if (c <= ' ' || c > '~' || c == '/' || c == '"' || c == '\'') {
      return core::InvalidArgumentError("name '" + std::string(name.substr(0, 64)) +
                                        "': not a user or group name");
    }
  }
  return core::Status::Ok();
}

core::Result<std::pair<core::Principal, core::QuotaFields>> ParseQuotaBody(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return core::InvalidArgumentError("body is not valid JSON");
  if (!j.is_object()) return core::InvalidArgumentError("body must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const char* k : {"scope", "name", "mem", "gpus", "compute", "jobs"})
      known = known || key == k;
    if (!known) return core::InvalidArgumentError("unknown field '" + key.substr(0, 64) + "'");
  }
  if (!j.contains("scope")) return core::InvalidArgumentError("scope: missing (user or group)");
  if (!j.contains("name")) return core::InvalidArgumentError("name: missing");
  core::Principal who;
  GPUSLICE_ASSIGN_OR_RETURN(std::string scope, GetString(j, "scope"));
  GPUSLICE_ASSIGN_OR_RETURN(who.kind, core::ParsePrincipalKind(scope));
  GPUSLICE_ASSIGN_OR_RETURN(who.name, GetString(j, "name"));
  GPUSLICE_RETURN_IF_ERROR(ValidatePrincipalName(who.name));
  core::QuotaFields f;
  GPUSLICE_RETURN_IF_ERROR(OptionalSize(j, "mem", &f.mem));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "gpus", true, &f.gpus));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "compute", false, &f.compute));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "jobs", true, &f.jobs));
  return std::make_pair(std::move(who), std::move(f));
}

core::Result<ResizeSpec> ParseResizeBody(std::string_view body) {
  json j = json::parse(body.empty() ? std::string_view("{}") : body, nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded()) return core::InvalidArgumentError("body is not valid JSON");
  if (!j.is_object()) return core::InvalidArgumentError("body must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key != "mem" && key != "compute" && key != "gpus" && key != "force" && key != "priority") {
      return core::InvalidArgumentError("unknown field '" + key.substr(0, 64) + "'");
    }
  }
  ResizeSpec spec;
  GPUSLICE_RETURN_IF_ERROR(OptionalSize(j, "mem", &spec.mem));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "compute", false, &spec.compute));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "gpus", true, &spec.gpus));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "priority", false, &spec.priority));
  if (j.contains("force")) {
    if (!j["force"].is_boolean()) return core::InvalidArgumentError("force: must be true or false");
    spec.force = j["force"].get<bool>();
  }
  return spec;
}

core::Result<UpdateSpec> ParseUpdateBody(std::string_view body) {
  json j = json::parse(body.empty() ? std::string_view("{}") : body, nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded()) return core::InvalidArgumentError("body is not valid JSON");
  if (!j.is_object()) return core::InvalidArgumentError("body must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key != "mem" && key != "compute" && key != "priority" && key != "after") {
      return core::InvalidArgumentError("unknown field '" + key.substr(0, 64) +
                                        "' (update takes mem, compute, priority and after)");
    }
  }
  UpdateSpec spec;
  GPUSLICE_RETURN_IF_ERROR(OptionalSize(j, "mem", &spec.mem));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "compute", false, &spec.compute));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "priority", false, &spec.priority));
  GPUSLICE_RETURN_IF_ERROR(OptionalField(j, "after", true, &spec.after));
  if (spec.after && !spec.after->empty()) {
    GPUSLICE_RETURN_IF_ERROR(core::ParseDependencies(*spec.after).status());
  }
  return spec;
}

json QuotaToJson(const QuotaView& q) {
  json j = {{"scope", core::PrincipalKindName(q.who.kind)},
            {"name", q.who.name},
            {"describe", q.quota.Describe()},
            {"in_use",
             {{"memory_bytes", q.in_use.memory_bytes},
              {"gpus", q.in_use.gpus},
              {"compute_milli", q.in_use.compute_milli},
              {"jobs", q.in_use.jobs}}}};
  if (q.quota.memory_bytes) j["memory_bytes"] = *q.quota.memory_bytes;
  if (q.quota.gpus) j["gpus"] = *q.quota.gpus;
  if (q.quota.compute_milli) j["compute_milli"] = *q.quota.compute_milli;
  if (q.quota.jobs) j["jobs"] = *q.quota.jobs;
  return j;
}

}  // namespace gpuslice::daemon
