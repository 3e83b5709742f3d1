#pragma once

// The HTTP routes of autoscaled services (docs/SERVICES.md), added to the
// Api's table by RegisterServiceRoutes:
//   POST   /v1/services                 create (201 + the service)
//   GET    /v1/services                 {"services": [...]}
//   GET    /v1/services/{name}          one service
//   POST   /v1/services/{name}/scale    {"desired": N} and/or {"replicas": "MIN-MAX"}
//   DELETE /v1/services/{name}          cancel its replicas and forget it
// Bodies are parsed like the jobs API's: never throwing, every field
// type-checked, errors naming the field.

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "core/autoscale.h"
#include "core/status.h"
#include "daemon/api.h"
#include "daemon/replicas.h"

namespace gpuslice::daemon {

void RegisterServiceRoutes(Api& api, ReplicaManager& manager);

// POST /v1/services: the service fields ("name", "replicas", "target_util",
// "scale_up_after", "scale_down_after", "cooldown") plus a job submission's
// fields (POST /v1/jobs: "mem", "compute", "gpus", "priority", "argv",
// "cwd", "env"...; not "name" or "mode").
core::Result<ServiceCreateSpec> ParseServiceBody(std::string_view body);

struct ScaleRequest {
  std::optional<uint32_t> desired;
  std::optional<core::ReplicaRange> range;
};
core::Result<ScaleRequest> ParseScaleBody(std::string_view body);

nlohmann::json ServiceToJson(const ServiceView& view);

}  // namespace gpuslice::daemon
