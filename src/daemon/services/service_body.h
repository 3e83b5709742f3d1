#pragma once

// The bodies of the autoscaled services' API (docs/SERVICES.md), parsed like
// the jobs API's: never throwing, every field type-checked, errors naming the
// field. Apart from the routes (replicas_api.h) so that the fuzz target
// (fuzz/api_json_fuzz.cc) can feed them without the daemon.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/jobs/autoscale.h"
#include "core/status.h"

namespace gpuslice::daemon {

struct ServiceCreateSpec {
  std::string name;
  core::AutoscalePolicy policy;
  // The replicas' request fields as a POST /v1/jobs body carries them
  // ("mem", "compute", "gpus", "priority"...; no argv, cwd, env, name, mode).
  nlohmann::json request = nlohmann::json::object();
  std::vector<std::string> argv;
  std::string cwd;
  std::vector<std::string> env;
};

// POST /v1/services: the service fields ("name", "replicas", "target_util",
// "scale_up_after", "scale_down_after", "cooldown") plus a job submission's
// fields (POST /v1/jobs: "mem", "compute", "gpus", "priority", "argv",
// "cwd", "env"...; not "name" or "mode").
core::Result<ServiceCreateSpec> ParseServiceBody(std::string_view body);

// POST /v1/services/{name}/scale: {"desired": N} and/or {"replicas": "MIN-MAX"}.
struct ScaleRequest {
  std::optional<uint32_t> desired;
  std::optional<core::ReplicaRange> range;
};
core::Result<ScaleRequest> ParseScaleBody(std::string_view body);

}  // namespace gpuslice::daemon
