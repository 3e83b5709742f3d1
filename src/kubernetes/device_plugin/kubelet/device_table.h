#pragma once

// The node's inventory and the devices each resource advertises, shared by
// the poller (writer) and every resource's ListAndWatch streams (readers,
// woken when their resource's list changes). Thread-safe.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "kubernetes/device_plugin/base/devices.h"

namespace gpuslice::kubernetes {

class DeviceTable {
 public:
  // Replaces the inventory; bumps the generation of each resource whose
  // device list (IDs or health) changed, and wakes its watchers. Returns the
  // resources whose lists changed.
  std::vector<Resource> Update(const Inventory& inventory);

  bool has_inventory() const;
  Inventory inventory() const;
  // The resources advertised now.
  std::vector<Resource> resources() const;

  struct Snapshot {
    uint64_t generation = 0;
    std::vector<Device> devices;
  };
  // The list of `resource` once its generation differs from `seen` (at once
  // when it does), or nullopt after `timeout` or Close(). A resource the node
  // no longer has answers an empty list.
  std::optional<Snapshot> WaitChange(const Resource& resource, uint64_t seen,
                                     std::chrono::milliseconds timeout);
  // Wakes every waiter for good (shutdown).
  void Close();

 private:
  mutable std::mutex mu_;
  std::condition_variable changed_;
  bool has_inventory_ = false;                       // Guarded by mu_.
  bool closed_ = false;                              // Guarded by mu_.
  Inventory inventory_;                              // Guarded by mu_.
  std::map<Resource, std::vector<Device>> devices_;  // Guarded by mu_.
  std::map<Resource, uint64_t> generation_;          // Guarded by mu_; never reset.
};

}  // namespace gpuslice::kubernetes
