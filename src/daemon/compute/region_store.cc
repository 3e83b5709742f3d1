#include "daemon/compute/region_store.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "daemon/base/log.h"
#include "daemon/launch/launcher.h"
#include "slice/base/allocate_file.h"
#include "slice/compute/coord_board_layout.h"
#include "slice/region/limits_page.h"
#include "slice/region/region.h"
#include "slice/region/region_layout.h"
#include "slice/region/region_snapshot.h"

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

slice::DeviceControls ControlsOf(const SliceLimits& limits, const std::string& uuid) {
  slice::DeviceControls c;
  c.uuid = uuid;
  c.limit_bytes = limits.memory_bytes_per_device;
  c.share_milli = limits.compute_milli;
  c.mode = limits.work_conserving ? slice::ComputeMode::kWorkConserving : slice::ComputeMode::kHard;
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

// A job's region, opened for the daemon's few writes into it (an older
// daemon's slice's controls, a moved device's name): never mapped, so a job
// that shrinks its file under the daemon makes a write fail or extend the
// file, never fault. O_NONBLOCK: a lease the job holds answers at
// once instead of after the lease-break time.
class JobRegionFile {
 public:
  explicit JobRegionFile(std::string path) : path_(std::move(path)) {
    fd_ = open(path_.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    err_ = fd_ < 0 ? errno : 0;
  }
  ~JobRegionFile() {
    if (fd_ >= 0) close(fd_);
  }
  JobRegionFile(const JobRegionFile&) = delete;
  JobRegionFile& operator=(const JobRegionFile&) = delete;

  // What the job reports now (its header and devices), from this file.
  core::Result<slice::RegionSnapshot> Devices() const {
    if (fd_ < 0) return ErrnoError(err_, "open slice region " + path_);
    return slice::RegionSnapshot::ReadFrom(fd_, path_, slice::RegionSnapshot::Part::kDevices);
  }
  // One field, with one pwrite(2): the shim reads each with one atomic load.
  template <typename T>
  core::Status Write(uint64_t offset, T value) const {
    const ssize_t n = pwrite(fd_, &value, sizeof value, off_t(offset));
    if (n == ssize_t(sizeof value)) return core::Status::Ok();
    return ErrnoError(n < 0 ? errno : EIO, "write slice region " + path_);
  }
  core::Status WriteBytes(uint64_t offset, const void* data, size_t size) const {
    const ssize_t n = pwrite(fd_, data, size, off_t(offset));
    if (n == ssize_t(size)) return core::Status::Ok();
    return ErrnoError(n < 0 ? errno : EIO, "write slice region " + path_);
  }
  // limits_generation + 1, after the fields it announces (the shim reads
  // them after an acquire load of it). The daemon is the only writer of
  // the generation of its slices; a job that writes it fools only itself.
  core::Status BumpGeneration(const slice::RegionSnapshot& before) const {
    return Write<uint64_t>(offsetof(slice::layout::RegionHeader, limits_generation),
                           before.limits_generation() + 1);
  }

 private:
  std::string path_;
  int fd_ = -1;
  int err_ = 0;
};

// An older daemon's slice: its processes have no limits page and follow the
// controls in their region, so a live change is written there, field by
// field, in the order Region::SetComputeShare stores them (mode and priority
// before the share), then the generation.
core::Status WriteLegacyControls(const std::string& path, const SliceLimits& limits) {
  namespace l = slice::layout;
  JobRegionFile file(path);
  GPUSLICE_ASSIGN_OR_RETURN(slice::RegionSnapshot now, file.Devices());
  for (const std::string& uuid : limits.uuids) {
    GPUSLICE_ASSIGN_OR_RETURN(uint32_t i, now.FindDevice(uuid));
    auto at = [i](size_t field) { return slice::DeviceFieldOffset(i, field); };
    GPUSLICE_RETURN_IF_ERROR(file.Write<uint64_t>(at(offsetof(l::DeviceEntry, limit_bytes)),
                                                  limits.memory_bytes_per_device));
    GPUSLICE_RETURN_IF_ERROR(file.Write<uint32_t>(at(offsetof(l::DeviceEntry, compute_mode)),
                                                  limits.work_conserving ? 2u : 0u));
    GPUSLICE_RETURN_IF_ERROR(file.Write<uint32_t>(at(offsetof(l::DeviceEntry, priority)),
                                                  uint32_t(limits.priority) + 1));
    GPUSLICE_RETURN_IF_ERROR(file.Write<uint32_t>(at(offsetof(l::DeviceEntry, compute_share_milli)),
                                                  limits.compute_milli));
    GPUSLICE_RETURN_IF_ERROR(file.Write<uint32_t>(at(offsetof(l::DeviceEntry, launches_paused)),
                                                  limits.launches_paused ? 1u : 0u));
  }
  return file.BumpGeneration(now);
}

// The region's copy of a moved slice's device names (Region::RenameDevice's
// rules, by pwrite).
core::Status RenameRegionDevices(const std::string& path,
                                 const std::vector<std::pair<std::string, std::string>>& pairs) {
  JobRegionFile file(path);
  for (const auto& [from, to] : pairs) {
    if (to.empty() || to.size() >= slice::layout::kUuidBytes) {
      return core::InvalidArgumentError("bad device UUID '" + to + "'");
    }
    GPUSLICE_ASSIGN_OR_RETURN(slice::RegionSnapshot now, file.Devices());
    GPUSLICE_ASSIGN_OR_RETURN(uint32_t i, now.FindDevice(from));
    if (slice::SameUuid(from, to)) continue;
    if (now.FindDevice(to).ok()) {
      return core::AlreadyExistsError("device " + to + " is part of slice " + path + " already");
    }
    char name[slice::layout::kUuidBytes] = {};
    std::memcpy(name, to.data(), to.size());
    GPUSLICE_RETURN_IF_ERROR(
        file.WriteBytes(slice::DeviceFieldOffset(i, offsetof(slice::layout::DeviceEntry, uuid)),
                        name, sizeof name));
    GPUSLICE_RETURN_IF_ERROR(file.BumpGeneration(now));
  }
  return core::Status::Ok();
}

// What one slice takes on the state disk, all of it allocated at creation:
// the region, the limits page, the members file (the compute arbiter's).
constexpr uint64_t kSliceBytes =
    slice::layout::kRegionSize + slice::layout::kLimitsPageSize + slice::board::kMembersSize;

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
  if (access(legacy.c_str(), F_OK) == 0) (void)slice::Region::Remove(legacy);
  // The daemon's, 0755: the job can read and map what is in it but cannot
  // rename, replace or add anything.
  if (mkdir(dir.c_str(), 0755) != 0) return ErrnoError(errno, "create slice directory " + dir);
  auto fail = [&](core::Status s) {
    (void)RemoveSliceDir(dir);
    return s;
  };
  if (chmod(dir.c_str(), 0755) != 0) return fail(ErrnoError(errno, "chmod " + dir));
  const std::string name =
      limits.name.empty() ? "job-" + id : limits.name.substr(0, slice::layout::kNameBytes - 1);

  // The daemon's decisions, before the region, so that no process of the
  // job can ever find a region without them.
  slice::LimitsOptions page;
  page.name = name;
  page.job_id = limits.job_id;
  page.shared_gid = limits.shared_gid;
  page.mode = root ? 0644 : 0444;
  for (const std::string& uuid : limits.uuids) page.devices.push_back(ControlsOf(limits, uuid));
  const std::string limits_path = dir + "/" + kLimitsName;
  auto created = slice::LimitsPage::Create(limits_path, page);
  if (!created.ok()) return fail(created.status().WithContext("create limits page " + limits_path));

  // The job's reports. Closed: it lists the slice's devices (the shim finds
  // a device's usage counters by UUID). Its own limit and compute fields
  // stay 0: nothing reads them in a slice that has a limits page, and a
  // shim too old to know the page gets no memory rather than no limit.
  slice::RegionOptions options;
  options.name = name;
  options.closed = true;
  for (const std::string& uuid : limits.uuids) options.devices.push_back({uuid, 0});
  const std::string path = dir + "/" + kRegionName;
  auto region = slice::Region::Create(path, options);
  if (!region.ok()) return fail(region.status().WithContext("create slice region " + path));
  // The daemon's mapping goes before the file becomes the job's: from here
  // on it reads the region only as a copy (slice::RegionSnapshot).
  region->reset();
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
  if (dir.empty()) return slice::Region::Remove(path);  // An older daemon's slice file.
  ForgetPage(dir + "/" + kLimitsName);
  return RemoveSliceDir(dir);
}

bool ShimRegionStore::Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

core::Result<std::vector<SliceUsage>> ShimRegionStore::Usage(const std::string& path) {
  // A copy, never a mapping: the region is the job's file and may shrink.
  auto region = slice::RegionSnapshot::Read(path, slice::RegionSnapshot::Part::kDevices);
  if (!region.ok()) return region.status();
  const std::string limits_path = LimitsPathOf(path);
  std::vector<SliceUsage> out;
  if (limits_path.empty()) {
    // An older daemon's slice: its only limits are in the job's file, which
    // decides nothing here.
    for (const slice::DeviceUsage& d : region->Devices()) {
      SliceUsage u;
      u.uuid = d.uuid;
      u.limit_bytes = slice::layout::kUnlimited;
      u.used_bytes = d.used_bytes;
      u.peak_bytes = d.peak_bytes;
      u.refused_allocs = d.refused_allocs;
      u.throttled_ns = d.throttled_ns;
      out.push_back(u);
    }
    return out;
  }
  std::vector<slice::DeviceControls> decided;
  GPUSLICE_RETURN_IF_ERROR(WithPage(limits_path, [&](slice::LimitsPage& page) {
    decided = page.Devices();
    return core::Status::Ok();
  }));
  // The devices are the ones the daemon gave the slice (its page), whatever
  // the job wrote into its region's device list; the numbers beside them
  // are what the job's processes report.
  const std::vector<slice::DeviceUsage> reported = region->Devices();
  for (const slice::DeviceControls& c : decided) {
    SliceUsage u;
    u.uuid = c.uuid;
    u.limit_bytes = c.limit_bytes;
    for (const slice::DeviceUsage& d : reported) {
      if (!slice::SameUuid(d.uuid, c.uuid)) continue;
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
  auto region = slice::RegionSnapshot::Read(path, slice::RegionSnapshot::Part::kAll);
  if (!region.ok()) return region.status();
  std::vector<int32_t> out;
  for (const slice::ProcessUsage& p : region->Processes()) out.push_back(p.pid);
  return out;
}

core::Status ShimRegionStore::Update(const std::string& path, const SliceLimits& limits) {
  const std::string limits_path = LimitsPathOf(path);
  if (!limits_path.empty()) {
    return WithPage(limits_path, [&](slice::LimitsPage& page) {
      for (const std::string& uuid : limits.uuids) {
        GPUSLICE_RETURN_IF_ERROR(page.Set(ControlsOf(limits, uuid)).WithContext(limits_path));
      }
      // Last: a process that sees the suspension end sees the limits back.
      return page.SetSuspension(limits.suspension).WithContext(limits_path);
    });
  }
  // An older daemon's slice: its processes have no limits page and follow
  // their region, so that is where a change must go to reach them.
  return WriteLegacyControls(path, limits).WithContext("update slice region " + path);
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
  GPUSLICE_RETURN_IF_ERROR(WithPage(limits_path, [&](slice::LimitsPage& page) {
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
  core::Status renamed = RenameRegionDevices(path, pairs);
  if (!renamed.ok()) LogWarn("slice " + path + ": moved, but its region: " + renamed.message());
  return core::Status::Ok();
}

core::Result<std::vector<std::string>> ShimRegionStore::Devices(const std::string& path) {
  const std::string limits_path = LimitsPathOf(path);
  std::vector<std::string> out;
  if (limits_path.empty()) {
    auto region = slice::RegionSnapshot::Read(path, slice::RegionSnapshot::Part::kDevices);
    if (!region.ok()) return region.status();
    for (const slice::DeviceUsage& d : region->Devices()) out.push_back(d.uuid);
    return out;
  }
  GPUSLICE_RETURN_IF_ERROR(WithPage(limits_path, [&](slice::LimitsPage& page) {
    for (const slice::DeviceControls& c : page.Devices()) out.push_back(c.uuid);
    return core::Status::Ok();
  }));
  return out;
}

core::Result<uint64_t> ShimRegionStore::ResumeRequest(const std::string& region_path) {
  if (SliceDirOf(region_path).empty()) return uint64_t{0};  // An older daemon's slice file.
  // The job's file in the daemon's directory (it cannot replace it, only
  // rewrite or truncate it): its header is read with pread and checked
  // like any report of the job's.
  const int fd = open(region_path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "open slice region " + region_path);
  using slice::layout::RegionHeader;
  unsigned char header[sizeof(RegionHeader)];
  const ssize_t n = pread(fd, header, sizeof(header), 0);
  const int err = errno;
  close(fd);
  if (n < 0) return ErrnoError(err, "read slice region " + region_path);
  uint64_t magic = 0, request = 0;
  uint32_t version = 0;
  std::memcpy(&magic, header + offsetof(RegionHeader, magic), sizeof(magic));
  std::memcpy(&version, header + offsetof(RegionHeader, version), sizeof(version));
  std::memcpy(&request, header + offsetof(RegionHeader, resume_request), sizeof(request));
  if (n != static_cast<ssize_t>(sizeof(header)) || magic != slice::layout::kRegionMagic ||
      version != slice::layout::kRegionVersion) {
    return core::FailedPreconditionError("slice region " + region_path +
                                         " is not a version-1 region (rewritten by its job?)");
  }
  return request;
}

core::Status ShimRegionStore::CheckRoom() {
  // Cheap while the disk stays full (one statvfs, nothing written); the
  // probe then proves the room the way a slice takes it.
  if (mkdir(dir_.c_str(), 0711) != 0 && errno != EEXIST) {
    return ErrnoError(errno, "create slice directory " + dir_);
  }
  struct statvfs fs {};
  if (statvfs(dir_.c_str(), &fs) == 0 && uint64_t(fs.f_bavail) * fs.f_frsize < kSliceBytes) {
    return ErrnoError(ENOSPC, "no room for a slice in " + dir_);
  }
  const std::string probe = dir_ + "/.room-probe";
  unlink(probe.c_str());
  int fd = open(probe.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return ErrnoError(errno, "probe room for a slice in " + dir_);
  const int err = slice::AllocateFile(fd, kSliceBytes);
  close(fd);
  unlink(probe.c_str());
  if (err != 0) return ErrnoError(err, "no room for a slice in " + dir_);
  return core::Status::Ok();
}

core::Status ShimRegionStore::WithPage(const std::string& limits_path,
                                       const std::function<core::Status(slice::LimitsPage&)>& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pages_.find(limits_path);
  if (it == pages_.end()) {
    auto page = slice::LimitsPage::OpenForUpdate(limits_path);
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
