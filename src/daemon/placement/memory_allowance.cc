#include "daemon/placement/memory_allowance.h"

#include <algorithm>

namespace gpuslice::daemon {

void ContextSizes::Observe(uint32_t gpu_index, int64_t pid, uint64_t bytes) {
  if (bytes == 0) return;
  const Key key{gpu_index, pid};
  current_[key] = bytes;
  auto before = previous_.find(key);
  if (before == previous_.end() || before->second != bytes) return;
  auto [it, added] = smallest_.emplace(gpu_index, bytes);
  if (!added) it->second = std::min(it->second, bytes);
}

void ContextSizes::EndSample() {
  previous_ = std::move(current_);
  current_.clear();
}

std::optional<uint64_t> ContextSizes::Of(uint32_t gpu_index) const {
  auto it = smallest_.find(gpu_index);
  if (it == smallest_.end()) return std::nullopt;
  return it->second;
}

uint64_t MemoryAllowance(uint32_t registered, std::optional<uint64_t> context_bytes,
                         uint64_t ceiling_bytes) {
  if (registered == 0) return 0;
  if (!context_bytes) return ceiling_bytes;
  // registered * context_bytes, saturating: a context size near 2^64 is
  // nonsense, but the ceiling still holds.
  if (*context_bytes != 0 && registered > ceiling_bytes / *context_bytes) return ceiling_bytes;
  return std::min<uint64_t>(ceiling_bytes, uint64_t{registered} * *context_bytes);
}

}  // namespace gpuslice::daemon
