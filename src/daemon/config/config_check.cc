#include "daemon/config/config_check.h"

#include <algorithm>

#include "daemon/placement/capacity.h"

namespace gpuslice::daemon {

core::Result<std::vector<std::string>> PoolsOfGpus(const PolicyConfig& rules,
                                                   const std::vector<GpuInfo>& gpus) {
  std::vector<std::string> pool_of(gpus.size(), rules.default_pool);
  std::vector<std::string> named(gpus.size());
  for (const PoolSpec& pool : rules.pools) {
    for (const std::string& want : pool.gpus) {
      size_t found = gpus.size();
      for (size_t i = 0; i < gpus.size(); ++i) {
        if (want == gpus[i].uuid || want == std::to_string(gpus[i].index)) found = i;
      }
      if (found == gpus.size()) {
        return core::InvalidArgumentError(
            "pool." + pool.name + ": no GPU '" + want + "' on this machine (give indices 0-" +
            std::to_string(gpus.empty() ? 0 : gpus.size() - 1) + " or UUIDs, see `gpuslice gpus`)");
      }
      if (!named[found].empty() && named[found] != pool.name) {
        return core::InvalidArgumentError("GPU " + want + " is in two pools: " + named[found] +
                                          " and " + pool.name);
      }
      named[found] = pool.name;
      pool_of[found] = pool.name;
    }
  }
  return pool_of;
}

core::Result<ConfigCheck> CheckConfigChange(const DaemonConfig& next, const InventorySnapshot& inv,
                                            const std::vector<core::Job>& live) {
  GPUSLICE_ASSIGN_OR_RETURN(std::vector<std::string> pool_of, PoolsOfGpus(next.rules, inv.gpus));
  ConfigCheck out;
  for (size_t i = 0; i < inv.gpus.size(); ++i) {
    out.pools.push_back("GPU " + std::to_string(inv.gpus[i].index) + " (" + inv.gpus[i].uuid +
                        "): pool " + pool_of[i]);
  }
  auto pool_of_index = [&](uint32_t index) -> std::string {
    for (size_t i = 0; i < inv.gpus.size(); ++i) {
      if (inv.gpus[i].index == index) return pool_of[i];
    }
    return "";
  };
  const bool one_pool = next.rules.pools.empty();
  auto pool_exists = [&](const std::string& p) {
    return std::find(pool_of.begin(), pool_of.end(), p) != pool_of.end() ||
           std::any_of(next.rules.pools.begin(), next.rules.pools.end(),
                       [&](const PoolSpec& s) { return s.name == p; });
  };
  GPUSLICE_ASSIGN_OR_RETURN(
      auto capacity,
      NodeCapacity::Create(inv.gpus, next.policy, one_pool ? std::vector<std::string>() : pool_of,
                           next.rules.default_pool));
  for (const core::Job& job : live) {
    const std::string pool = job.request.pool.empty() ? next.rules.default_pool : job.request.pool;
    const std::string who = "job " + std::to_string(job.id) + " (" + job.user + ", " +
                            job.request.Describe() + ", pool " + pool + ")";
    if (job.state == core::JobState::kQueued) {
      ++out.queued;
      core::Status ever = capacity->CouldEverFit(job.request);
      if (!ever.ok()) {
        out.queued_failing.push_back(who + ": would fail at the restart: " + ever.message());
      }
      continue;
    }
    ++out.running;
    if (!pool_exists(pool)) {
      out.outside_pool.push_back(who + ": pool '" + pool +
                                 "' would no longer exist; it runs on where it is, flagged "
                                 "outside_pool");
      continue;
    }
    std::string moved;
    for (uint32_t g : job.allocation.gpu_indices) {
      const std::string p = pool_of_index(g);
      if (p.empty() || p == pool) continue;
      moved +=
          (moved.empty() ? "GPU " : ", GPU ") + std::to_string(g) + " would be in pool '" + p + "'";
    }
    if (!moved.empty()) {
      out.outside_pool.push_back(who + ": " + moved +
                                 "; it runs on where it is, flagged outside_pool, and nothing "
                                 "new of pool '" +
                                 pool + "' is placed there");
    }
  }
  return out;
}

std::string FormatConfigCheck(const std::string& file, const ConfigCheck& c) {
  std::string out = file + ": valid\n\nGPUs and pools:\n";
  for (const std::string& p : c.pools) out += "  " + p + "\n";
  out += "\nrunning and suspended jobs: " + std::to_string(c.running) +
         "; a restart with this configuration ends none of them\n";
  if (c.outside_pool.empty()) {
    out += "  every one stays in its pool\n";
  } else {
    for (const std::string& l : c.outside_pool) out += "  " + l + "\n";
  }
  out += "\nqueued jobs: " + std::to_string(c.queued) + "\n";
  if (c.queued_failing.empty()) {
    out += "  every one can still run here\n";
  } else {
    for (const std::string& l : c.queued_failing) out += "  " + l + "\n";
  }
  return out;
}

}  // namespace gpuslice::daemon
