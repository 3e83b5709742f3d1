#pragma once

// Which pool each GPU of the inventory is in (docs/CONFIG.md, "Pools"): the
// admin's pool rules resolved once against the GPUs the daemon found, at
// start. A GPU no rule names, and every GPU when there are no pools, is in
// the default pool. The API, the metrics, moves and the check of a job's
// pool after a restart read it.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "daemon/config/policy_config.h"
#include "daemon/node/inventory.h"

namespace gpuslice::daemon {

class GpuPools {
 public:
  explicit GpuPools(std::string default_pool) : default_pool_(std::move(default_pool)) {}

  // Resolves `rules`' pools against `gpus`: the pool of each GPU, in the
  // order of `gpus` (empty when no pools are configured, or there are no
  // GPUs). An error names a rule that cannot be applied; the pools are then
  // the default pool alone.
  core::Result<std::vector<std::string>> Resolve(const PolicyConfig& rules,
                                                 const std::vector<GpuInfo>& gpus);
  // The pool of the GPU with inventory index `gpu_index`.
  const std::string& PoolOf(uint32_t gpu_index) const;

 private:
  std::string default_pool_;
  std::map<uint32_t, std::string> pool_of_gpu_;
};

}  // namespace gpuslice::daemon
