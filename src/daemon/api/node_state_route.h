#pragma once

// GET /v1/node: what this node can still hold, per GPU, for a cluster
// scheduler (the Kubernetes scheduler extender polls it every second;
// docs/KUBERNETES-extender.md). Read-only and served on the metrics listener
// (--metrics-listen) too, without authentication, so it carries capacities
// and health only: no job, user, command or process.
//
//   {"version": 1, "node": "<hostname>", "degraded": false, "at_ms": ...,
//    "gpus": [{"index": 0, "uuid": "GPU-...", "model": "...", "pool": "default",
//              "island": -1, "healthy": true,
//              "memory_total": B, "memory_allocated": B,
//              "compute_allocated_milli": 300, "whole": false,
//              "mig_enabled": false, "mig_free": {"1g.10gb": 3},
//              "mig_total": {"1g.10gb": 7}}]}
//
// "allocated" is what the daemon has handed out to running jobs (a fraction's
// memory limit and share; all of a GPU for a whole-GPU job) plus memory held
// on the GPU by processes outside gpuslice: what placement on this node
// would see. A fraction with no share counts 1 per-mille, as the daemon
// places it. `whole` is true when a whole-GPU job holds the GPU.

#include <nlohmann/json.hpp>

#include "daemon/api/api.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

// Version of the body's layout ("version"); bumped on any incompatible change.
inline constexpr int kNodeStateVersion = 1;
inline constexpr const char* kNodeStatePath = "/v1/node";

// The body of GET /v1/node.
nlohmann::json NodeStateJson(Service& service);

// Registers GET /v1/node on `api`. `service` must outlive it.
void RegisterNodeStateRoute(Api& api, Service& service);

}  // namespace gpuslice::daemon
