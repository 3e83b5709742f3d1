#include "daemon/services/service_body.h"

#include "core/units.h"
#include "daemon/api/api_json.h"

namespace gpuslice::daemon {

using core::Result;
using nlohmann::json;

namespace {

// A string field, or a number given for convenience ("replicas": 3).
Result<std::optional<std::string>> TextField(json& j, const char* field) {
  if (!j.contains(field) || j[field].is_null()) {
    j.erase(field);
    return std::optional<std::string>();
  }
  json v = j[field];
  j.erase(field);
  if (v.is_number_unsigned()) return std::optional<std::string>(std::to_string(v.get<uint64_t>()));
  if (!v.is_string()) return core::InvalidArgumentError(std::string(field) + ": must be a string");
  std::string s = v.get<std::string>();
  if (s.size() > 256) return core::InvalidArgumentError(std::string(field) + ": too long");
  return std::optional<std::string>(s);
}

core::Status Duration(json& j, const char* field, const char* flag, int64_t* out_ms) {
  GPUSLICE_ASSIGN_OR_RETURN(std::optional<std::string> text, TextField(j, field));
  if (!text) return core::Status::Ok();
  auto d = core::ParseDuration(*text);
  if (!d.ok()) return core::InvalidArgumentError(std::string(flag) + ": " + d.status().message());
  *out_ms = d->count();
  return core::Status::Ok();
}

}  // namespace

Result<ServiceCreateSpec> ParseServiceBody(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return core::InvalidArgumentError("body is not valid JSON");
  if (!j.is_object()) return core::InvalidArgumentError("body must be a JSON object");
  if (j.contains("mode")) {
    return core::InvalidArgumentError("mode: a service's replicas are always submitted jobs");
  }
  ServiceCreateSpec spec;
  GPUSLICE_ASSIGN_OR_RETURN(std::optional<std::string> name, TextField(j, "name"));
  if (!name) return core::InvalidArgumentError("name: missing (the service's name)");
  spec.name = *name;
  GPUSLICE_ASSIGN_OR_RETURN(std::optional<std::string> replicas, TextField(j, "replicas"));
  if (!replicas) return core::InvalidArgumentError("replicas: missing (e.g. \"1-4\")");
  GPUSLICE_ASSIGN_OR_RETURN(spec.policy.replicas, core::ParseReplicaRange(*replicas));
  GPUSLICE_ASSIGN_OR_RETURN(std::optional<std::string> target, TextField(j, "target_util"));
  if (target) {
    auto milli = core::ParseShareMilli(*target);
    if (!milli.ok()) {
      return core::InvalidArgumentError("--target-util: " + milli.status().message());
    }
    spec.policy.target_milli = *milli;
  }
  GPUSLICE_RETURN_IF_ERROR(
      Duration(j, "scale_up_after", "--scale-up-after", &spec.policy.scale_up_after_ms));
  GPUSLICE_RETURN_IF_ERROR(
      Duration(j, "scale_down_after", "--scale-down-after", &spec.policy.scale_down_after_ms));
  GPUSLICE_RETURN_IF_ERROR(Duration(j, "cooldown", "--cooldown", &spec.policy.cooldown_ms));
  GPUSLICE_RETURN_IF_ERROR(spec.policy.Validate());

  // The rest is a job submission: the jobs API parses and checks it.
  GPUSLICE_ASSIGN_OR_RETURN(SubmitSpec submit, ParseSubmitBody(j.dump()));
  if (submit.argv.empty()) {
    return core::InvalidArgumentError("argv: missing (the command every replica runs)");
  }
  spec.argv = std::move(submit.argv);
  spec.cwd = std::move(submit.cwd);
  spec.env = std::move(submit.env);
  j.erase("argv");
  j.erase("cwd");
  j.erase("env");
  spec.request = std::move(j);
  return spec;
}

Result<ScaleRequest> ParseScaleBody(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return core::InvalidArgumentError("body is not valid JSON");
  if (!j.is_object()) return core::InvalidArgumentError("body must be a JSON object");
  ScaleRequest r;
  for (const auto& [key, value] : j.items()) {
    if (key == "desired") {
      if (!value.is_number_unsigned() || value.get<uint64_t>() > core::kMaxReplicas) {
        return core::InvalidArgumentError("desired: must be a replica count (0-" +
                                          std::to_string(core::kMaxReplicas) + ")");
      }
      r.desired = value.get<uint32_t>();
    } else if (key == "replicas") {
      std::string text;
      if (value.is_number_unsigned()) {
        text = std::to_string(value.get<uint64_t>());
      } else if (value.is_string()) {
        text = value.get<std::string>();
      } else {
        return core::InvalidArgumentError("replicas: must be a range such as \"1-4\"");
      }
      GPUSLICE_ASSIGN_OR_RETURN(r.range, core::ParseReplicaRange(text));
    } else {
      return core::InvalidArgumentError("unknown field '" + key.substr(0, 64) + "'");
    }
  }
  if (!r.desired && !r.range) {
    return core::InvalidArgumentError("give \"desired\" (a count), \"replicas\" (a range) or both");
  }
  return r;
}

}  // namespace gpuslice::daemon
