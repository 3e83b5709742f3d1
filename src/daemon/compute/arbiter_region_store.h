#pragma once

// The compute arbiter's hook into the daemon, without touching Service: a
// RegionStore that wraps the real one and tells the arbiter (arbiter.h) about
// every slice the Service creates, changes or removes. Shares, modes,
// priorities and pauses thus reach the arbiter from the daemon's own
// decisions (SliceLimits), never from a file a job can write.
//
// Threading: called by the Service's thread only, like any RegionStore.

#include <string>
#include <vector>

#include "daemon/compute/arbiter.h"
#include "daemon/compute/region_store.h"

namespace gpuslice::daemon {

// The job id in a slice path: the digits after the last "job-"
// ("<dir>/job-12.slice", "<dir>/job-12/region"); 0 when there is none.
uint64_t JobIdOfSlicePath(const std::string& path);

class ArbiterRegionStore : public RegionStore {
 public:
  // Neither is owned; both must outlive this store.
  ArbiterRegionStore(RegionStore& inner, Arbiter& arbiter) : inner_(inner), arbiter_(arbiter) {}

  // The inner region first, then the slice's members file and board entries;
  // if the arbiter refuses a slice that has a compute share (its board is
  // full, say), the region is removed again and the error returned: a share
  // that nothing would enforce is not handed out.
  core::Result<std::string> Create(const SliceLimits& limits) override;
  core::Status CheckRoom() override { return inner_.CheckRoom(); }
  core::Status Remove(const std::string& path) override;
  bool Exists(const std::string& path) override { return inner_.Exists(path); }
  core::Result<std::vector<SliceUsage>> Usage(const std::string& path) override {
    return inner_.Usage(path);
  }
  core::Result<std::vector<int32_t>> Pids(const std::string& path) override {
    return inner_.Pids(path);
  }
  core::Status Update(const std::string& path, const SliceLimits& limits) override;
  core::Status Move(const std::string& path,
                    const std::vector<std::pair<std::string, std::string>>& pairs,
                    const SliceLimits& after) override;
  core::Result<uint64_t> ResumeRequest(const std::string& path) override {
    return inner_.ResumeRequest(path);
  }
  core::Result<std::vector<std::string>> Devices(const std::string& path) override {
    return inner_.Devices(path);
  }
  uint64_t ContendedNs(const std::string& region_path) override;
  uint64_t WaitedNs(const std::string& region_path) override;
  std::optional<uint64_t> ChargedNs(const std::string& region_path) override;
  void DistrustReports(const std::string& region_path) override;
  std::string LimitsPathOf(const std::string& region_path) const override {
    return inner_.LimitsPathOf(region_path);
  }

 private:
  RegionStore& inner_;
  Arbiter& arbiter_;
};

}  // namespace gpuslice::daemon
