#include "daemon/compute/region_store.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "daemon/base/log.h"
#include "daemon/launch/launcher.h"
#include "shim/limits_page.h"
#include "shim/region.h"

namespace gpuslice::daemon {
namespace {

constexpr char kRegionName[] = "region";
constexpr char kLimitsName[] = "limits";

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}
std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

shim::DeviceControls ControlsOf(const SliceLimits& limits, const std::string& uuid) {
  shim::DeviceControls c;
  c.uuid = uuid;
  c.limit_bytes = limits.memory_bytes_per_device;
  c.share_milli = limits.compute_milli;
  c.mode = limits.work_conserving ? shim::ComputeMode::kWorkConserving : shim::ComputeMode::kHard;
  c.priority = limits.priority;
  c.launches_paused = limits.launches_paused;
  return c;
}

// Removes a slice directory and everything in it (the daemon's own
// directory: the job cannot have put anything there).
core::Status RemoveSliceDir(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return core::NotFoundError("no slice " + dir);
  std::filesystem::remove_all(dir, ec);
  if (ec) return core::InternalError("remove slice " + dir + ": " + ec.message());
  return core::Status::Ok();
}

}  // namespace

ShimRegionStore::ShimRegionStore(std::string dir) : dir_(std::move(dir)) {}
ShimRegionStore::~ShimRegionStore() = default;

std::string ShimRegionStore::SliceDirOf(const std::string& region_path) const {
  if (Basename(region_path) != kRegionName) return "";
  std::string dir = Dirname(region_path);
  if (Dirname(dir) != dir_ || Basename(dir).rfind("job-", 0) != 0) return "";
  return dir;
}

std::string ShimRegionStore::LimitsPathOf(const std::string& region_path) const {
  std::string dir = SliceDirOf(region_path);
  return dir.empty() ? "" : dir + "/" + kLimitsName;
}

core::Result<std::string> ShimRegionStore::Create(const SliceLimits& limits) {
  const bool root = geteuid() == 0;
  // 0711: jobs of every user reach their own slice; nobody lists them.
  if (mkdir(dir_.c_str(), 0711) != 0 && errno != EEXIST) {
    return ErrnoError(errno, "create slice directory " + dir_);
  }
  const std::string id = std::to_string(limits.job_id);
  const std::string dir = dir_ + "/job-" + id;
  // A slice left by a crashed daemon for this id (or by an elastic resize,
  // which makes the slice again) is stale: ids are unique, so no live job
  // of another id can be using it.
  (void)RemoveSliceDir(dir);
  ForgetPage(dir + "/" + kLimitsName);
  const std::string legacy = dir_ + "/job-" + id + ".slice";  // An older daemon's.
  if (access(legacy.c_str(), F_OK) == 0) (void)shim::Region::Remove(legacy);
  // The daemon's, 0755: the job can read and map what is in it but cannot
  // rename, replace or add anything.
  if (mkdir(dir.c_str(), 0755) != 0) return ErrnoError(errno, "create slice directory " + dir);
  auto fail = [&](core::Status s) {
    (void)RemoveSliceDir(dir);
    return s;
  };
  if (chmod(dir.c_str(), 0755) != 0) return fail(ErrnoError(errno, "chmod " + dir));
  const std::string name =
      limits.name.empty() ? "job-" + id : limits.name.substr(0, shim::layout::kNameBytes - 1);

  // The daemon's decisions, before the region, so that no process of the
  // job can ever find a region without them.
  shim::LimitsOptions page;
  page.name = name;
  page.job_id = limits.job_id;
  page.shared_gid = limits.shared_gid;
  page.mode = root ? 0644 : 0444;
  for (const std::string& uuid : limits.uuids) page.devices.push_back(ControlsOf(limits, uuid));
  const std::string limits_path = dir + "/" + kLimitsName;
  auto created = shim::LimitsPage::Create(limits_path, page);
  if (!created.ok()) return fail(created.status().WithContext("create limits page " + limits_path));

  // The job's reports. Closed: it lists the slice's devices (the shim finds
  // a device's usage counters by UUID). Its own limit and compute fields
  // stay 0: nothing reads them in a slice that has a limits page, and a
  // shim too old to know the page gets no memory rather than no limit.
  shim::RegionOptions options;
  options.name = name;
  options.closed = true;
  for (const std::string& uuid : limits.uuids) options.devices.push_back({uuid, 0});
  const std::string path = dir + "/" + kRegionName;
  auto region = shim::Region::Create(path, options);
  if (!region.ok()) return fail(region.status().WithContext("create slice region " + path));
  if (root && chown(path.c_str(), limits.uid,
                    limits.shared_gid != 0 ? limits.shared_gid : limits.gid) != 0) {
    return fail(ErrnoError(errno, "chown slice region " + path));
  }
  // A slice of its own group: writable by it (its container holds it as a
  // supplementary group), by nobody else.
  if (root && limits.shared_gid != 0 && chmod(path.c_str(), 0660) != 0) {
    return fail(ErrnoError(errno, "chmod slice region " + path));
  }
  std::lock_guard<std::mutex> lock(mu_);
  pages_[limits_path] = std::move(*created);
  return path;
}

core::Status ShimRegionStore::Remove(const std::string& path) {
  const std::string dir = SliceDirOf(path);
  if (dir.empty()) return shim::Region::Remove(path);  // An older daemon's slice file.
  ForgetPage(dir + "/" + kLimitsName);
  return RemoveSliceDir(dir);
}

bool ShimRegionStore::Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

core::Result<std::vector<SliceUsage>> ShimRegionStore::Usage(const std::string& path) {
  auto region = shim::Region::Open(path);
  if (!region.ok()) return region.status();
  const std::string limits_path = LimitsPathOf(path);
  std::vector<SliceUsage> out;
  if (limits_path.empty()) {
    // An older daemon's slice: its only limits are in the job's file, which
    // decides nothing here.
    for (const shim::DeviceUsage& d : (*region)->Devices()) {
      SliceUsage u;
      u.uuid = d.uuid;
      u.limit_bytes = shim::layout::kUnlimited;
      u.used_bytes = d.used_bytes;
      u.peak_bytes = d.peak_bytes;
      u.refused_allocs = d.refused_allocs;
      u.throttled_ns = d.throttled_ns;
      out.push_back(u);
    }
    return out;
  }
  std::vector<shim::DeviceControls> decided;
  GPUSLICE_RETURN_IF_ERROR(WithPage(limits_path, [&](shim::LimitsPage& page) {
    decided = page.Devices();
    return core::Status::Ok();
  }));
  // The devices are the ones the daemon gave the slice (its page), whatever
  // the job wrote into its region's device list; the numbers beside them
  // are what the job's processes report.
  const std::vector<shim::DeviceUsage> reported = (*region)->Devices();
  for (const shim::DeviceControls& c : decided) {
    SliceUsage u;
    u.uuid = c.uuid;
    u.limit_bytes = c.limit_bytes;
    for (const shim::DeviceUsage& d : reported) {
      if (!shim::SameUuid(d.uuid, c.uuid)) continue;
      u.used_bytes = d.used_bytes;
      u.peak_bytes = d.peak_bytes;
      u.refused_allocs = d.refused_allocs;
      u.throttled_ns = d.throttled_ns;
      break;
    }
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
  const std::string limits_path = LimitsPathOf(path);
  if (!limits_path.empty()) {
    return WithPage(limits_path, [&](shim::LimitsPage& page) {
      for (const std::string& uuid : limits.uuids) {
        GPUSLICE_RETURN_IF_ERROR(page.Set(ControlsOf(limits, uuid)).WithContext(limits_path));
      }
      return core::Status::Ok();
    });
  }
  // An older daemon's slice: its processes have no limits page and follow
  // their region, so that is where a change must go to reach them.
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

core::Status ShimRegionStore::Move(const std::string& path,
                                   const std::vector<std::pair<std::string, std::string>>& pairs,
                                   const SliceLimits& after) {
  (void)after;  // The page keeps each device's controls; Update sets new ones.
  const std::string limits_path = LimitsPathOf(path);
  if (limits_path.empty()) {
    return core::UnimplementedError("slice " + path +
                                    " was made by an older daemon: it has no limits page to move");
  }
  GPUSLICE_RETURN_IF_ERROR(WithPage(limits_path, [&](shim::LimitsPage& page) {
    for (size_t i = 0; i < pairs.size(); ++i) {
      core::Status s = page.MoveDevice(pairs[i].first, pairs[i].second);
      if (!s.ok()) {
        // All or nothing: the ones done go back.
        for (size_t j = i; j-- > 0;) (void)page.MoveDevice(pairs[j].second, pairs[j].first);
        return s.WithContext(limits_path);
      }
    }
    return core::Status::Ok();
  }));
  // The region's copy of the names: what the job's processes match NVML's
  // answers and their usage reports against. It decides nothing, so a
  // region the job broke only costs it those reports.
  auto region = shim::Region::Open(path);
  core::Status renamed = region.status();
  for (size_t i = 0; renamed.ok() && i < pairs.size(); ++i) {
    renamed = (*region)->RenameDevice(pairs[i].first, pairs[i].second);
  }
  if (!renamed.ok()) LogWarn("slice " + path + ": moved, but its region: " + renamed.message());
  return core::Status::Ok();
}

core::Result<std::vector<std::string>> ShimRegionStore::Devices(const std::string& path) {
  const std::string limits_path = LimitsPathOf(path);
  std::vector<std::string> out;
  if (limits_path.empty()) {
    auto region = shim::Region::Open(path);
    if (!region.ok()) return region.status();
    for (const shim::DeviceUsage& d : (*region)->Devices()) out.push_back(d.uuid);
    return out;
  }
  GPUSLICE_RETURN_IF_ERROR(WithPage(limits_path, [&](shim::LimitsPage& page) {
    for (const shim::DeviceControls& c : page.Devices()) out.push_back(c.uuid);
    return core::Status::Ok();
  }));
  return out;
}

core::Status ShimRegionStore::WithPage(const std::string& limits_path,
                                       const std::function<core::Status(shim::LimitsPage&)>& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pages_.find(limits_path);
  if (it == pages_.end()) {
    auto page = shim::LimitsPage::OpenForUpdate(limits_path);
    if (!page.ok()) return page.status();
    it = pages_.emplace(limits_path, std::move(*page)).first;
  }
  return fn(*it->second);
}

void ShimRegionStore::ForgetPage(const std::string& limits_path) {
  std::lock_guard<std::mutex> lock(mu_);
  pages_.erase(limits_path);
}

}  // namespace gpuslice::daemon
