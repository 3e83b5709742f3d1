#include "daemon/placement/pool_index.h"

namespace gpuslice::daemon {

std::vector<std::string> PoolIndex::Names() const {
  std::vector<std::string> out;
  for (const auto& [name, mask] : masks_) out.push_back(name);
  if (out.empty()) out.push_back(default_pool_);
  return out;
}

core::Result<std::string> PoolIndex::Resolve(const core::ResourceRequest& request) const {
  const std::string& pool = request.pool.empty() ? default_pool_ : request.pool;
  if (masks_.empty() ? pool == default_pool_ : masks_.count(pool) > 0) {
    return masks_.empty() ? std::string() : pool;
  }
  std::string have;
  for (const std::string& p : Names()) have += (have.empty() ? "" : ", ") + p;
  return core::InvalidArgumentError("--pool: no pool '" + request.pool +
                                    "' on this machine (pools: " + have + ")");
}

uint64_t PoolIndex::MaskOf(const std::string& pool) const {
  return pool.empty() ? 0 : masks_.at(pool);
}

uint64_t PoolIndex::ModelMaskFor(const core::ResourceRequest& request, const std::string& pool,
                                 const std::vector<std::string>& interned) const {
  uint64_t mask = MaskOf(pool);
  if (request.gpu_models.empty()) return mask;
  // The name NVML gives is before '@'.
  uint64_t models = 0;
  for (size_t i = 0; i < interned.size(); ++i) {
    const std::string base = interned[i].substr(0, interned[i].rfind('@'));
    for (const std::string& w : request.gpu_models) {
      if (core::GpuModelMatches(w, base)) models |= 1ull << i;
    }
  }
  return pool.empty() ? models : (mask & models);
}

std::string PoolIndex::PoolOfModel(const std::string& interned) {
  return interned.substr(interned.rfind('@') + 1);
}

}  // namespace gpuslice::daemon
