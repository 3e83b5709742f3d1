#include "daemon/config/gpu_pools.h"

#include "daemon/base/log.h"
#include "daemon/config/config_check.h"

namespace gpuslice::daemon {

core::Result<std::vector<std::string>> GpuPools::Resolve(const PolicyConfig& rules,
                                                         const std::vector<GpuInfo>& gpus) {
  default_pool_ = rules.default_pool;
  pool_of_gpu_.clear();
  for (const GpuInfo& g : gpus) pool_of_gpu_[g.index] = rules.default_pool;
  if (rules.pools.empty() || gpus.empty()) return std::vector<std::string>{};
  GPUSLICE_ASSIGN_OR_RETURN(std::vector<std::string> pool_of, PoolsOfGpus(rules, gpus));
  for (size_t i = 0; i < pool_of.size(); ++i) pool_of_gpu_[gpus[i].index] = pool_of[i];
  std::string summary;
  for (size_t i = 0; i < pool_of.size(); ++i) {
    summary += (i ? ", " : "") + std::to_string(gpus[i].index) + ":" + pool_of[i];
  }
  LogInfo("pools (GPU:pool): " + summary + "; default pool " + rules.default_pool);
  return pool_of;
}

const std::string& GpuPools::PoolOf(uint32_t gpu_index) const {
  auto it = pool_of_gpu_.find(gpu_index);
  return it == pool_of_gpu_.end() ? default_pool_ : it->second;
}

}  // namespace gpuslice::daemon
