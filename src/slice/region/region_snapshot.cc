#include "slice/region/region_snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "slice/base/pid_namespace.h"
#include "slice/base/posix_error.h"

namespace gpuslice::slice {
namespace {

using core::Result;
using layout::DeviceEntry;
using layout::ProcessSlot;
using layout::RegionHeader;

uint64_t BytesOf(RegionSnapshot::Part part) {
  return part == RegionSnapshot::Part::kAll ? layout::kRegionSize : layout::kProcessesOffset;
}

}  // namespace

template <typename T>
T RegionSnapshot::Field(uint64_t offset) const {
  T v{};
  // Parse made bytes_ as long as the part needs; the check keeps a wrong
  // offset from ever reading past the copy.
  if (offset <= bytes_.size() && sizeof(T) <= bytes_.size() - offset) {
    std::memcpy(&v, bytes_.data() + offset, sizeof(T));
  }
  return v;
}

Result<RegionSnapshot> RegionSnapshot::Read(const std::string& path, Part part) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      return core::UnavailableError("region " + path + " is leased by its job: no report");
    }
    return PosixError("open region " + path, err);
  }
  Result<RegionSnapshot> r = ReadFrom(fd, path, part);
  close(fd);
  return r;
}

Result<RegionSnapshot> RegionSnapshot::ReadFrom(int fd, const std::string& path, Part part) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return PosixError("stat region " + path, errno);
  if (!S_ISREG(st.st_mode)) return core::FailedPreconditionError(path + " is not a file");
  if (uint64_t(st.st_size) != layout::kRegionSize) {
    return core::FailedPreconditionError(
        "region " + path + " has size " + std::to_string(st.st_size) + ", expected " +
        std::to_string(layout::kRegionSize) + " (truncated, or another version): no report");
  }
  // The size may change between fstat and here (the job owns the file):
  // what counts is what pread returns.
  const uint64_t want = BytesOf(part);
  std::vector<unsigned char> bytes(want);
  uint64_t got = 0;
  while (got < want) {
    const ssize_t n = pread(fd, bytes.data() + got, want - got, off_t(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PosixError("read region " + path, errno);
    if (n == 0) break;  // Shrunk under us.
    got += uint64_t(n);
  }
  bytes.resize(got);
  return Parse(std::move(bytes), path, part);
}

Result<RegionSnapshot> RegionSnapshot::Parse(std::vector<unsigned char> bytes,
                                             const std::string& path, Part part) {
  if (bytes.size() < BytesOf(part)) {
    return core::FailedPreconditionError("region " + path + ": read " +
                                         std::to_string(bytes.size()) + " bytes, need " +
                                         std::to_string(BytesOf(part)) + " (truncated): no report");
  }
  bytes.resize(BytesOf(part));
  RegionSnapshot s(std::move(bytes), path, part);
  if (s.Field<uint64_t>(offsetof(RegionHeader, magic)) != layout::kRegionMagic) {
    return core::FailedPreconditionError("region " + path + " has a bad magic number");
  }
  const uint32_t version = s.Field<uint32_t>(offsetof(RegionHeader, version));
  if (version != layout::kRegionVersion ||
      s.Field<uint32_t>(offsetof(RegionHeader, header_size)) != layout::kHeaderSize ||
      s.Field<uint64_t>(offsetof(RegionHeader, total_size)) != layout::kRegionSize ||
      s.Field<uint32_t>(offsetof(RegionHeader, device_capacity)) != layout::kMaxDevices ||
      s.Field<uint32_t>(offsetof(RegionHeader, process_capacity)) != layout::kMaxProcesses ||
      s.Field<uint32_t>(offsetof(RegionHeader, device_entry_size)) != layout::kDeviceEntrySize ||
      s.Field<uint32_t>(offsetof(RegionHeader, process_slot_size)) != layout::kProcessSlotSize ||
      s.Field<uint64_t>(offsetof(RegionHeader, devices_offset)) != layout::kDevicesOffset ||
      s.Field<uint64_t>(offsetof(RegionHeader, processes_offset)) != layout::kProcessesOffset) {
    return core::FailedPreconditionError(
        "region " + path + " has version " + std::to_string(version) + " or a layout this build (" +
        std::to_string(layout::kRegionVersion) + ") does not understand");
  }
  return s;
}

std::vector<DeviceUsage> RegionSnapshot::Devices() const {
  std::vector<DeviceUsage> out;
  for (uint32_t i = 0; i < layout::kMaxDevices; ++i) {
    const uint64_t at = layout::kDevicesOffset + uint64_t{i} * layout::kDeviceEntrySize;
    const uint64_t owner = Field<uint64_t>(at + offsetof(DeviceEntry, owner));
    if (layout::OwnerState(owner) != layout::kEntryReady) continue;
    DeviceUsage u;
    u.index = i;
    const char* uuid =
        reinterpret_cast<const char*>(bytes_.data() + at + offsetof(DeviceEntry, uuid));
    u.uuid = std::string(uuid, strnlen(uuid, layout::kUuidBytes));
    u.limit_bytes = Field<uint64_t>(at + offsetof(DeviceEntry, limit_bytes));
    u.used_bytes = Field<uint64_t>(at + offsetof(DeviceEntry, used_bytes));
    u.peak_bytes = Field<uint64_t>(at + offsetof(DeviceEntry, peak_bytes));
    u.refused_allocs = Field<uint64_t>(at + offsetof(DeviceEntry, refused_allocs));
    u.throttled_ns = Field<uint64_t>(at + offsetof(DeviceEntry, throttled_ns));
    u.launches_paused = Field<uint32_t>(at + offsetof(DeviceEntry, launches_paused)) != 0;
    out.push_back(std::move(u));
  }
  return out;
}

std::vector<ProcessUsage> RegionSnapshot::Processes() const {
  std::vector<ProcessUsage> out;
  if (part_ != Part::kAll) return out;
  const uint64_t own_ns = OwnPidNamespace();
  for (uint32_t i = 0; i < layout::kMaxProcesses; ++i) {
    const uint64_t at = layout::kProcessesOffset + uint64_t{i} * layout::kProcessSlotSize;
    const uint64_t owner = Field<uint64_t>(at + offsetof(ProcessSlot, owner));
    if (layout::OwnerState(owner) != layout::kEntryReady) continue;
    ProcessUsage u;
    u.slot = i;
    u.pid = layout::OwnerPid(owner);
    const uint64_t pid_ns = Field<uint64_t>(at + offsetof(ProcessSlot, pid_ns));
    if (pid_ns != 0 && pid_ns != own_ns) {
      // Named by the reader's pids, as NVML names them.
      const pid_t visible =
          VisiblePid(pid_ns, u.pid, Field<uint64_t>(at + offsetof(ProcessSlot, start_time)));
      if (visible != 0) u.pid = visible;
    }
    for (uint32_t d = 0; d < layout::kMaxDevices; ++d) {
      u.used_bytes[d] = Field<uint64_t>(at + offsetof(ProcessSlot, used_bytes) + 8 * d);
      u.overhead_bytes[d] = Field<uint64_t>(at + offsetof(ProcessSlot, overhead_bytes) + 8 * d);
    }
    out.push_back(u);
  }
  return out;
}

Result<uint32_t> RegionSnapshot::FindDevice(std::string_view uuid) const {
  for (const DeviceUsage& d : Devices()) {
    if (SameUuid(d.uuid, uuid)) return d.index;
  }
  return core::NotFoundError("device " + std::string(uuid) + " is not part of slice " + path_);
}

uint64_t RegionSnapshot::limits_generation() const {
  return Field<uint64_t>(offsetof(RegionHeader, limits_generation));
}

}  // namespace gpuslice::slice
