#pragma once

// The daemon's Prometheus metrics (docs/MONITORING.md): GPUs under
// dcgm-exporter's names, slices and jobs, the scheduler and the daemon's
// health, rendered from the Service's public accessors in the text
// exposition format 0.0.4. Served as GET /metrics on the API (and on the
// plain TCP metrics listener, HttpServer::ListenMetrics).
//
// Cheap by design: everything comes from what the Service already holds
// (the last usage sample, the event counters, the wait histogram); a scrape
// reads no region file and calls no NVML.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/api/api.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

struct MetricsOptions {
  std::string hostname;       // The Hostname label of GPU series; "" = gethostname().
  std::string version;        // gpuslice_build_info{version}.
  int64_t start_time_ms = 0;  // The daemon's start (gpuslice_daemon_start_time_seconds).
};

// The whole exposition. Calls JobReads::List, which may run a pending queue
// plan first (so queue figures are current).
std::string RenderMetrics(Service& service, const MetricsOptions& options);

// Registers GET /metrics on `api`. `service` must outlive `api`.
void RegisterMetrics(Api& api, Service& service, MetricsOptions options);

// Every metric family RenderMetrics can emit, whether or not it has samples
// right now (some appear only with running jobs, or when NVML knows the
// figure). For the dashboard's and the docs' checks.
const std::vector<std::string_view>& MetricFamilyNames();

}  // namespace gpuslice::daemon
