#include "daemon/api/node_state_route.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>

#include "core/placement/placement_model.h"

namespace gpuslice::daemon {

using nlohmann::json;

namespace {

// XIDs after which NVIDIA says the GPU needs a reset or is gone (double-bit
// ECC, NVLink error, fell off the bus, contained/uncontained ECC): nothing
// new should be placed on the GPU until someone looks at it.
constexpr uint32_t kFatalXids[] = {48, 74, 79, 94, 95};

bool Healthy(const GpuUsage& u) {
  if (u.ecc_uncorrected > 0) return false;
  return std::find(std::begin(kFatalXids), std::end(kFatalXids), u.last_xid) ==
         std::end(kFatalXids);
}

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

// What running jobs hold on one GPU (by inventory index).
struct Held {
  uint64_t memory = 0;
  uint32_t milli = 0;
  bool whole = false;
};

}  // namespace

json NodeStateJson(Service& service) {
  const InventorySnapshot& inv = service.inventory();
  std::map<uint32_t, Held> held;
  std::map<std::string, bool> mig_taken;  // MIG instance UUID -> held.
  for (const JobView& v : service.reads().List(false)) {
    if (v.job.state != core::JobState::kRunning) continue;
    const core::Allocation& a = v.job.allocation;
    const core::ResourceRequest& r = v.job.request;
    for (size_t i = 0; i < a.gpu_indices.size(); ++i) {
      if (r.kind == core::RequestKind::kMig) {
        if (i < a.gpu_uuids.size()) mig_taken[a.gpu_uuids[i]] = true;
        continue;
      }
      Held& h = held[a.gpu_indices[i]];
      // A fraction with the whole share (or none asked with no memory: the
      // daemon places those as whole GPUs too) holds the GPU like a whole job.
      const bool whole =
          r.kind == core::RequestKind::kWholeGpus || a.compute_milli >= core::kMilliPerGpu;
      if (whole) {
        h.whole = true;
        continue;
      }
      h.memory += a.memory_bytes_per_gpu;
      // No share: compute is uncapped and the daemon places it with the
      // smallest share (JobSetup::kShareOfNoShareMilli).
      h.milli += std::max(a.compute_milli, JobSetup::kShareOfNoShareMilli);
    }
  }
  std::map<uint32_t, uint64_t> foreign;
  for (const ForeignProcess& f : service.foreign().processes()) {
    if (f.mig_uuid.empty()) {
      foreign[f.gpu_index] += f.used_memory;
    } else {
      mig_taken[f.mig_uuid] = true;  // Any process outside gpuslice takes an instance.
    }
  }

  json gpus = json::array();
  for (const GpuInfo& g : inv.gpus) {
    bool healthy = true;
    for (const GpuUsage& u : service.usage().gpus()) {
      if (u.index == g.index) healthy = Healthy(u);
    }
    const Held h = held.count(g.index) ? held[g.index] : Held{};
    uint64_t mem = h.whole ? g.memory_total : h.memory + foreign[g.index];
    json gj = {{"index", g.index},
               {"uuid", g.uuid},
               {"model", g.model},
               {"pool", service.pools().PoolOf(g.index)},
               {"island", g.island},
               {"healthy", healthy},
               {"memory_total", g.memory_total},
               {"memory_allocated", std::min(mem, g.memory_total)},
               {"compute_allocated_milli",
                h.whole ? core::kMilliPerGpu : std::min(h.milli, core::kMilliPerGpu)},
               {"whole", h.whole},
               {"mig_enabled", g.mig_enabled}};
    if (g.mig_enabled) {
      json free = json::object(), total = json::object();
      for (const MigInstance& m : g.mig) {
        const std::string profile = m.profile.empty() ? "unknown" : m.profile;
        total[profile] = total.value(profile, 0) + 1;
        if (!free.contains(profile)) free[profile] = 0;
        if (!mig_taken.count(m.uuid)) free[profile] = free[profile].get<int>() + 1;
      }
      gj["mig_free"] = std::move(free);
      gj["mig_total"] = std::move(total);
    }
    gpus.push_back(std::move(gj));
  }
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  return {{"version", kNodeStateVersion},
          {"node", Hostname()},
          {"degraded", service.degraded_mode().degraded()},
          {"degraded_reason", service.degraded_mode().reason()},
          {"at_ms", now},
          {"gpus", std::move(gpus)}};
}

void RegisterNodeStateRoute(Api& api, Service& service) {
  api.AddRoute("GET", kNodeStatePath, RouteScope::kRead, [&service](const ApiRequest&) {
    ApiResponse r;
    r.body = NodeStateJson(service).dump(-1, ' ', false, json::error_handler_t::replace);
    return r;
  });
}

}  // namespace gpuslice::daemon
