#include "daemon/region_store.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/launcher.h"
#include "shim/region.h"

namespace gpuslice::daemon {

core::Result<std::string> ShimRegionStore::Create(const SliceLimits& limits) {
  if (mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoError(errno, "create slice directory " + dir_);
  }
  std::string path = dir_ + "/job-" + std::to_string(limits.job_id) + ".slice";
  // A region left by a crashed daemon for this id is stale: ids are unique,
  // so no live job can be using it.
  if (access(path.c_str(), F_OK) == 0) (void)shim::Region::Remove(path);
  shim::RegionOptions options;
  options.name = limits.name.empty() ? "job-" + std::to_string(limits.job_id)
                                     : limits.name.substr(0, 63);
  // Closed: the job may use only the devices listed, with their limits.
  options.closed = true;
  for (const std::string& uuid : limits.uuids) {
    options.devices.push_back({uuid, limits.memory_bytes_per_device});
  }
  auto region = shim::Region::Create(path, options);
  if (!region.ok()) return region.status().WithContext("create slice region " + path);
  // Set before the job starts, so its first launch already follows them.
  const shim::ComputeMode mode =
      limits.work_conserving ? shim::ComputeMode::kWorkConserving : shim::ComputeMode::kHard;
  for (const std::string& uuid : limits.uuids) {
    core::Status s = (*region)->SetComputeShare(uuid, limits.compute_milli, mode, limits.priority);
    if (s.ok() && limits.launches_paused) s = (*region)->SetLaunchesPaused(uuid, true);
    if (!s.ok()) {
      (void)shim::Region::Remove(path);
      return s.WithContext("set the compute share of " + uuid + " in " + path);
    }
  }
  if (geteuid() == 0 && chown(path.c_str(), limits.uid, limits.gid) != 0) {
    core::Status s = ErrnoError(errno, "chown slice region " + path);
    (void)shim::Region::Remove(path);
    return s;
  }
  return path;
}

core::Status ShimRegionStore::Remove(const std::string& path) {
  return shim::Region::Remove(path);
}

bool ShimRegionStore::Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

core::Result<std::vector<SliceUsage>> ShimRegionStore::Usage(const std::string& path) {
  auto region = shim::Region::Open(path);
  if (!region.ok()) return region.status();
  std::vector<SliceUsage> out;
  for (const shim::DeviceUsage& d : (*region)->Devices()) {
    SliceUsage u;
    u.uuid = d.uuid;
    u.limit_bytes = d.limit_bytes;
    u.used_bytes = d.used_bytes;
    u.peak_bytes = d.peak_bytes;
    u.refused_allocs = d.refused_allocs;
    u.throttled_ns = d.throttled_ns;
    out.push_back(u);
  }
  return out;
}

core::Result<std::vector<int32_t>> ShimRegionStore::Pids(const std::string& path) {
  auto region = shim::Region::Open(path);
  if (!region.ok()) return region.status();
  std::vector<int32_t> out;
  for (const shim::ProcessUsage& p : (*region)->Processes()) out.push_back(p.pid);
  return out;
}

core::Status ShimRegionStore::Update(const std::string& path, const SliceLimits& limits) {
  auto region = shim::Region::Open(path);
  if (!region.ok()) return region.status().WithContext("open slice region " + path);
  const shim::ComputeMode mode =
      limits.work_conserving ? shim::ComputeMode::kWorkConserving : shim::ComputeMode::kHard;
  for (const std::string& uuid : limits.uuids) {
    GPUSLICE_RETURN_IF_ERROR(
        (*region)->SetLimit(uuid, limits.memory_bytes_per_device).WithContext(path));
    GPUSLICE_RETURN_IF_ERROR(
        (*region)->SetComputeShare(uuid, limits.compute_milli, mode, limits.priority)
            .WithContext(path));
    GPUSLICE_RETURN_IF_ERROR(
        (*region)->SetLaunchesPaused(uuid, limits.launches_paused).WithContext(path));
  }
  return core::Status::Ok();
}

}  // namespace gpuslice::daemon
