#include "daemon/placement/foreign_charges.h"

#include <algorithm>
#include <utility>

#include "core/units.h"
#include "daemon/placement/flat_gpu.h"

namespace gpuslice::daemon {
namespace {

core::Demand ChargeDemand(uint64_t bytes) {
  // One per-mille of compute: a placement needs a share to hold memory, and
  // this keeps a whole-GPU request off the GPU.
  return core::Demand::Fraction(1, bytes);
}

}  // namespace

bool ForeignCharges::Set(core::ClusterState& state, size_t flat, uint32_t gpu_index, Part part,
                         uint64_t bytes, std::string who) {
  auto it = by_flat_.find(flat);
  if (it == by_flat_.end()) {
    if (bytes == 0) return false;
    it = by_flat_.emplace(flat, Charge{}).first;
    it->second.gpu_index = gpu_index;
  }
  Charge& c = it->second;
  uint64_t& part_bytes = part == Part::kForeign ? c.foreign : c.over;
  (part == Part::kForeign ? c.foreign_who : c.over_who) = std::move(who);
  if (part_bytes == bytes && c.charged == c.Wanted()) return false;
  part_bytes = bytes;
  return ChargeOne(state, flat);
}

bool ForeignCharges::ChargeOne(core::ClusterState& state, size_t flat) {
  auto it = by_flat_.find(flat);
  if (it == by_flat_.end()) return false;
  Charge& c = it->second;
  const core::Placement p = FlatPlacement(flat);
  bool changed = false;
  if (c.charged > 0) {
    (void)state.Release(ChargeDemand(c.charged), p);
    c.charged = 0;
    changed = true;
  }
  if (c.Wanted() == 0) {
    by_flat_.erase(it);
    return changed;
  }
  const core::GpuState& g = state.node(p.node).gpus[p.gpus[0]];
  uint64_t bytes = std::min(c.Wanted(), g.mem_free);
  if (bytes == 0 || g.milli_free == 0) return changed;  // Full: charged when jobs give back.
  if (state.Allocate(ChargeDemand(bytes), p).ok()) {
    c.charged = bytes;
    changed = true;
  }
  return changed;
}

bool ForeignCharges::Recharge(core::ClusterState& state) {
  bool changed = false;
  for (auto it = by_flat_.begin(); it != by_flat_.end();) {
    // ChargeOne never erases here: what is short is still wanted.
    size_t flat = it->first;
    bool short_of = it->second.charged < it->second.Wanted();
    ++it;
    if (short_of) changed = ChargeOne(state, flat) || changed;
  }
  return changed;
}

uint64_t ForeignCharges::Charged(uint32_t gpu_index) const {
  for (const auto& [flat, c] : by_flat_) {
    if (c.gpu_index == gpu_index) return c.charged;
  }
  return 0;
}

uint64_t ForeignCharges::ChargedAt(size_t flat) const {
  auto it = by_flat_.find(flat);
  return it == by_flat_.end() ? 0 : it->second.charged;
}

std::string ForeignCharges::Describe(const std::function<bool(size_t flat)>& include) const {
  std::string out;
  for (const auto& [flat, c] : by_flat_) {
    if (!include(flat)) continue;
    if (c.foreign > 0) {
      out += "; GPU " + std::to_string(c.gpu_index) + ": " + core::FormatBytes(c.foreign) +
             " held by processes outside gpuslice (" + c.foreign_who + ")";
    }
    if (c.over > 0) {
      out += "; GPU " + std::to_string(c.gpu_index) + ": " + core::FormatBytes(c.over) +
             " held beyond their limits by " + c.over_who;
    }
  }
  return out;
}

}  // namespace gpuslice::daemon
