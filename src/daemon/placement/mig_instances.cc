#include "daemon/placement/mig_instances.h"

#include <algorithm>
#include <utility>

namespace gpuslice::daemon {

bool IsOfProfile(const MigInstance& m, const core::MigProfile& profile) {
  if (!m.profile.empty()) return m.profile == profile.ToString();
  // Unnamed instance: match by memory (decimal GB, as profiles say).
  return (m.memory_total + 500'000'000ull) / 1'000'000'000ull == profile.memory_gb;
}

bool MigInstances::Unit::ModelAllowed(const core::ResourceRequest& request) const {
  if (request.gpu_models.empty()) return true;
  return std::any_of(request.gpu_models.begin(), request.gpu_models.end(),
                     [&](const std::string& w) { return core::GpuModelMatches(w, model); });
}

void MigInstances::Add(uint32_t gpu_index, std::string model, MigInstance instance,
                       std::string pool) {
  Unit u;
  u.gpu_index = gpu_index;
  u.model = std::move(model);
  u.instance = std::move(instance);
  u.pool = std::move(pool);
  units_.push_back(std::move(u));
}

int MigInstances::Find(const core::ResourceRequest& request, const std::string& pool,
                       bool free_only) const {
  for (size_t i = 0; i < units_.size(); ++i) {
    const Unit& u = units_[i];
    if (free_only && !u.Free()) continue;
    if (!pool.empty() && u.pool != pool) continue;
    if (!u.ModelAllowed(request)) continue;
    if (IsOfProfile(u.instance, request.mig)) return static_cast<int>(i);
  }
  return -1;
}

int MigInstances::IndexOf(const std::string& uuid) const {
  for (size_t i = 0; i < units_.size(); ++i) {
    if (units_[i].instance.uuid == uuid) return static_cast<int>(i);
  }
  return -1;
}

bool MigInstances::Take(size_t i) {
  Unit& u = units_.at(i);
  if (u.taken) return false;
  u.taken = true;
  return true;
}

void MigInstances::SetForeign(const std::string& uuid, uint64_t bytes, std::string who) {
  int i = IndexOf(uuid);
  if (i < 0) return;
  Unit& u = units_[i];
  u.foreign_bytes = who.empty() ? 0 : bytes;
  u.foreign = std::move(who);
}

std::string MigInstances::ForeignOf(const std::string& uuid) const {
  int i = IndexOf(uuid);
  return i < 0 ? "" : units_[i].foreign;
}

bool MigInstances::HeldByJob(const std::string& uuid) const {
  int i = IndexOf(uuid);
  return i >= 0 && units_[i].taken;
}

}  // namespace gpuslice::daemon
