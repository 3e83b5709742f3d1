#include "kubernetes/device_plugin/kubelet/device_table.h"

namespace gpuslice::kubernetes {

std::vector<Resource> DeviceTable::Update(const Inventory& inventory) {
  std::map<Resource, std::vector<Device>> next = AdvertisedDevices(inventory);
  std::vector<Resource> changed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [r, devices] : next) {
      auto it = devices_.find(r);
      if (it == devices_.end() || it->second != devices) changed.push_back(r);
    }
    for (const auto& [r, devices] : devices_) {
      if (next.count(r) == 0) changed.push_back(r);
    }
    for (const Resource& r : changed) ++generation_[r];
    devices_ = std::move(next);
    inventory_ = inventory;
    has_inventory_ = true;
  }
  if (!changed.empty()) changed_.notify_all();
  return changed;
}

bool DeviceTable::has_inventory() const {
  std::lock_guard<std::mutex> lock(mu_);
  return has_inventory_;
}

Inventory DeviceTable::inventory() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inventory_;
}

std::vector<Resource> DeviceTable::resources() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Resource> out;
  for (const auto& [r, devices] : devices_) out.push_back(r);
  return out;
}

std::optional<DeviceTable::Snapshot> DeviceTable::WaitChange(const Resource& resource,
                                                             uint64_t seen,
                                                             std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto generation = [&] {
    auto it = generation_.find(resource);
    return it == generation_.end() ? uint64_t{0} : it->second;
  };
  if (!changed_.wait_for(lock, timeout, [&] { return closed_ || generation() != seen; })) {
    return std::nullopt;
  }
  if (closed_) return std::nullopt;
  Snapshot s;
  s.generation = generation();
  auto it = devices_.find(resource);
  if (it != devices_.end()) s.devices = it->second;
  return s;
}

void DeviceTable::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  changed_.notify_all();
}

}  // namespace gpuslice::kubernetes
