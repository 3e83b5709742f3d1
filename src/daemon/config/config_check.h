#pragma once

// `gpusliced --check-config FILE` (docs/CONFIG.md, "Checking a change"):
// what a new configuration would do to the jobs the daemon has now, before
// the restart that applies it. Pure: main.cc reads the GPUs (NVML) and the
// live jobs (the ledger, read-only) and prints the report.
//
// A restart keeps every running and suspended job whatever the new pools
// say (docs/DAEMON.md, "Restart and recovery"): one whose GPUs are now in
// another pool, or whose pool is gone, runs on flagged `outside_pool`. A
// queued job that no GPU of its pool could ever hold fails at the restart.

#include <string>
#include <vector>

#include "core/jobs/job.h"
#include "core/status.h"
#include "daemon/config/config.h"
#include "daemon/node/inventory.h"

namespace gpuslice::daemon {

// Each GPU's pool (same order as `gpus`) under `rules`: the default pool
// unless a `pool.NAME` line names the GPU by index or UUID. Errors: a GPU
// the machine lacks, a GPU in two pools.
core::Result<std::vector<std::string>> PoolsOfGpus(const PolicyConfig& rules,
                                                   const std::vector<GpuInfo>& gpus);

struct ConfigCheck {
  std::vector<std::string> pools;  // "GPU 0 (GPU-...): pool shared"
  size_t running = 0;              // Running and suspended jobs.
  size_t queued = 0;
  // One line per running or suspended job the new pools leave outside its
  // pool (it runs on, flagged), and per queued job that would fail.
  std::vector<std::string> outside_pool;
  std::vector<std::string> queued_failing;
};

// `live`: the jobs as the ledger has them now (queued, running, suspended).
core::Result<ConfigCheck> CheckConfigChange(const DaemonConfig& next, const InventorySnapshot& inv,
                                            const std::vector<core::Job>& live);

// The report as `gpusliced --check-config` prints it.
std::string FormatConfigCheck(const std::string& file, const ConfigCheck& check);

}  // namespace gpuslice::daemon
