#pragma once

// Slice regions (the shared-memory files the shim enforces limits from),
// behind a seam. ShimRegionStore uses the shim's region library; tests use
// FakeRegionStore.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace gpuslice::daemon {

struct SliceLimits {
  uint64_t job_id = 0;
  uint32_t uid = 0;  // Owner of the region file (the job's user).
  uint32_t gid = 0;
  std::string name;
  std::vector<std::string> uuids;  // One entry per device of the slice.
  uint64_t memory_bytes_per_device = 0;
  uint32_t compute_milli = 0;  // 0: no compute share (not coordinated).
  // Over the share's cap when the GPU is otherwise idle (work-conserving),
  // or never (hard, the default).
  bool work_conserving = false;
  // The job's priority. Stored for every slice, whole-GPU and MIG ones too;
  // the shim orders slices by it when they take turns on a GPU.
  core::Priority priority = core::Priority::kNormal;
  // Idle reclaim's "stop launching new work": while set, the shim holds the
  // slice's new kernel launches (memory stays allocated).
  bool launches_paused = false;
};

struct SliceUsage {
  std::string uuid;
  uint64_t limit_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t refused_allocs = 0;  // Allocations the shim refused for the limit.
  uint64_t throttled_ns = 0;    // Time launches waited for their compute turn.
};

class RegionStore {
 public:
  virtual ~RegionStore() = default;
  // Creates the job's region; returns its path (for GPUSLICE_SLICE).
  virtual core::Result<std::string> Create(const SliceLimits& limits) = 0;
  virtual core::Status Remove(const std::string& path) = 0;
  virtual bool Exists(const std::string& path) = 0;
  virtual core::Result<std::vector<SliceUsage>> Usage(const std::string& path) = 0;
  // Pids of the processes that have the slice open (live process slots).
  virtual core::Result<std::vector<int32_t>> Pids(const std::string& path) = 0;
  // Live change of an existing slice: memory limit, compute share, mode,
  // priority and pause flag of every device in `limits.uuids`. The devices
  // themselves cannot change (a closed region's device list is fixed).
  virtual core::Status Update(const std::string& path, const SliceLimits& limits) = 0;
};

// Regions in `dir` (created 0755 so jobs of any user can reach their own
// region; each region file is 0600 and owned by the job's user). Each
// device entry gets the slice's memory limit, and its compute share, mode
// and priority through Region::SetComputeShare.
class ShimRegionStore : public RegionStore {
 public:
  explicit ShimRegionStore(std::string dir) : dir_(std::move(dir)) {}
  core::Result<std::string> Create(const SliceLimits& limits) override;
  core::Status Remove(const std::string& path) override;
  bool Exists(const std::string& path) override;
  core::Result<std::vector<SliceUsage>> Usage(const std::string& path) override;
  core::Result<std::vector<int32_t>> Pids(const std::string& path) override;
  core::Status Update(const std::string& path, const SliceLimits& limits) override;

 private:
  std::string dir_;
};

class FakeRegionStore : public RegionStore {
 public:
  core::Result<std::string> Create(const SliceLimits& limits) override {
    std::string path = "/fake/slice-" + std::to_string(limits.job_id);
    regions[path] = limits;
    return path;
  }
  core::Status Remove(const std::string& path) override {
    if (regions.erase(path) == 0) return core::NotFoundError("no region " + path);
    return core::Status::Ok();
  }
  bool Exists(const std::string& path) override { return regions.count(path) > 0; }
  core::Result<std::vector<SliceUsage>> Usage(const std::string& path) override {
    auto it = regions.find(path);
    if (it == regions.end()) return core::NotFoundError("no region " + path);
    std::vector<SliceUsage> u;
    for (const std::string& id : it->second.uuids) {
      SliceUsage su;
      su.uuid = id;
      su.limit_bytes = it->second.memory_bytes_per_device;
      su.used_bytes = used.count(path) ? used[path] : 0;
      su.peak_bytes = su.used_bytes;
      u.push_back(su);
    }
    return u;
  }
  core::Result<std::vector<int32_t>> Pids(const std::string& path) override {
    if (!regions.count(path)) return core::NotFoundError("no region " + path);
    return pids.count(path) ? pids[path] : std::vector<int32_t>{};
  }
  core::Status Update(const std::string& path, const SliceLimits& limits) override {
    auto it = regions.find(path);
    if (it == regions.end()) return core::NotFoundError("no region " + path);
    updates.emplace_back(path, limits);
    SliceLimits next = limits;
    next.uuids = it->second.uuids;
    it->second = next;
    return core::Status::Ok();
  }

  std::map<std::string, SliceLimits> regions;
  // Every Update, as asked (devices and limits), in order.
  std::vector<std::pair<std::string, SliceLimits>> updates;
  // Set by tests: per region, bytes used on each device and the live pids.
  std::map<std::string, uint64_t> used;
  std::map<std::string, std::vector<int32_t>> pids;
};

}  // namespace gpuslice::daemon
