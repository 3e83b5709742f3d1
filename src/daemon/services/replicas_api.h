#pragma once

// The HTTP routes of autoscaled services (docs/SERVICES.md), added to the
// Api's table by RegisterServiceRoutes:
//   POST   /v1/services                 create (201 + the service)
//   GET    /v1/services                 {"services": [...]}
//   GET    /v1/services/{name}          one service
//   POST   /v1/services/{name}/scale    {"desired": N} and/or {"replicas": "MIN-MAX"}
//   DELETE /v1/services/{name}          cancel its replicas and forget it
// Bodies: service_body.h.

#include <nlohmann/json.hpp>

#include "daemon/api/api.h"
#include "daemon/services/replicas.h"
#include "daemon/services/service_body.h"

namespace gpuslice::daemon {

void RegisterServiceRoutes(Api& api, ReplicaManager& manager);

nlohmann::json ServiceToJson(const ServiceView& view);

}  // namespace gpuslice::daemon
