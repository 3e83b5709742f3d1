// Fuzzes the daemon's readers of what a job writes: the slice
// region (slice::RegionSnapshot, as the daemon's region store reads it) and
// the compute members file (daemon::ReadReport, the arbiter's). Both files
// are the job's: they may hold any bytes, at any length, at any moment. A
// reader must give a report or an error, never crash, hang or read outside
// what it copied; a report must stay within the layout's bounds.
//
// The input's first byte says how the rest is used:
//   bit 0 clear: the rest is the file itself, raw;
//   bit 0 set:   a whole, valid file, as its creator makes it (ready devices,
//                live processes, live members), patched by the rest (Patch),
//                so that the parsers get past their header checks and into
//                the entries; with bit 1 set, also cut to a length the input
//                chooses.
// Each file also goes through a memfd, so that the real pread paths run.

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "daemon/compute/arbiter_members.h"
#include "slice/compute/coord_board_layout.h"
#include "slice/region/region_layout.h"
#include "slice/region/region_snapshot.h"

namespace {

namespace bd = gpuslice::slice::board;
namespace rl = gpuslice::slice::layout;
using gpuslice::slice::RegionSnapshot;

template <typename T>
void Put(std::vector<uint8_t>& b, uint64_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

// A region as Region::Create makes it, with two ready devices and three
// live process slots (pids of this process's namespace: no /proc lookup).
std::vector<uint8_t> ValidRegion() {
  std::vector<uint8_t> b(rl::kRegionSize, 0);
  Put<uint64_t>(b, offsetof(rl::RegionHeader, magic), rl::kRegionMagic);
  Put<uint32_t>(b, offsetof(rl::RegionHeader, version), rl::kRegionVersion);
  Put<uint32_t>(b, offsetof(rl::RegionHeader, header_size), rl::kHeaderSize);
  Put<uint64_t>(b, offsetof(rl::RegionHeader, total_size), rl::kRegionSize);
  Put<uint32_t>(b, offsetof(rl::RegionHeader, device_capacity), rl::kMaxDevices);
  Put<uint32_t>(b, offsetof(rl::RegionHeader, process_capacity), rl::kMaxProcesses);
  Put<uint32_t>(b, offsetof(rl::RegionHeader, device_entry_size), rl::kDeviceEntrySize);
  Put<uint32_t>(b, offsetof(rl::RegionHeader, process_slot_size), rl::kProcessSlotSize);
  Put<uint64_t>(b, offsetof(rl::RegionHeader, devices_offset), rl::kDevicesOffset);
  Put<uint64_t>(b, offsetof(rl::RegionHeader, processes_offset), rl::kProcessesOffset);
  for (uint32_t d = 0; d < 2; ++d) {
    const uint64_t at = rl::kDevicesOffset + uint64_t{d} * rl::kDeviceEntrySize;
    Put<uint64_t>(b, at, rl::MakeOwner(1, rl::kEntryReady));
    const char* uuid = d == 0 ? "GPU-aaaa" : "MIG-bbbb";
    std::memcpy(b.data() + at + offsetof(rl::DeviceEntry, uuid), uuid, std::strlen(uuid));
    Put<uint64_t>(b, at + offsetof(rl::DeviceEntry, used_bytes), 1ull << 30);
  }
  for (uint32_t s = 0; s < 3; ++s) {
    const uint64_t at = rl::kProcessesOffset + uint64_t{s} * rl::kProcessSlotSize;
    Put<uint64_t>(b, at, rl::MakeOwner(int32_t(100 + s), rl::kEntryReady));
    Put<uint64_t>(b, at + offsetof(rl::ProcessSlot, used_bytes), 1ull << 20);
  }
  return b;
}

// A members file as the daemon creates it, with two members beating now.
std::vector<uint8_t> ValidMembers(uint64_t now_ns) {
  std::vector<uint8_t> b(bd::kMembersSize, 0);
  Put<uint64_t>(b, offsetof(bd::MembersHeader, magic), bd::kMembersMagic);
  Put<uint32_t>(b, offsetof(bd::MembersHeader, version), bd::kMembersVersion);
  Put<uint32_t>(b, offsetof(bd::MembersHeader, header_size), bd::kMembersHeaderSize);
  Put<uint64_t>(b, offsetof(bd::MembersHeader, total_size), bd::kMembersSize);
  for (uint32_t m = 0; m < 2; ++m) {
    const uint64_t at = bd::kMembersSlotsOffset + uint64_t{m} * bd::kMemberSlotSize;
    Put<uint64_t>(b, at + offsetof(bd::MemberSlot, owner), (uint64_t{200 + m} << 32) | 1);
    Put<uint32_t>(b, at + offsetof(bd::MemberSlot, flags), bd::kMemberGpuTime);
    Put<uint64_t>(b, at + offsetof(bd::MemberSlot, heartbeat_ns), now_ns);
    Put<uint64_t>(b, at + offsetof(bd::MemberSlot, gpu_ns), 1000);
  }
  return b;
}

// A valid file patched in place for one input, and put back as it was when
// the input is done (a copy of half a megabyte per input, on top of what
// the readers copy, made the target crawl). The input: after 3 bytes of
// header (flags, then a u16 length as a fraction of the file's, used with
// bit 1), records of (u32 position, u8 length, that many bytes), each
// written at position modulo the file's size.
class Patched {
 public:
  Patched(std::vector<uint8_t>& file, const uint8_t* data, size_t size)
      : file_(file), size_(file.size()) {
    if (size >= 3 && (data[0] & 2) != 0) {
      const uint32_t cut = uint32_t(data[1]) | uint32_t(data[2]) << 8;
      size_ = uint64_t(file.size()) * cut / 65535u;
    }
    size_t i = size >= 3 ? 3 : size;
    while (i + 5 <= size && size_ > 0) {
      uint32_t at;
      std::memcpy(&at, data + i, 4);
      const size_t len = data[i + 4];
      i += 5;
      for (size_t k = 0; k < len && i < size; ++k, ++i) {
        const size_t where = (uint64_t(at) + k) % size_;
        undo_.emplace_back(where, file_[where]);
        file_[where] = data[i];
      }
    }
  }
  ~Patched() {
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) file_[it->first] = it->second;
  }
  const uint8_t* data() const { return file_.data(); }
  size_t size() const { return size_; }

 private:
  std::vector<uint8_t>& file_;
  size_t size_;
  std::vector<std::pair<size_t, uint8_t>> undo_;
};

// One memfd for every input: the file's bytes written where they are not
// zero, its holes read as zeros as a truncated and regrown region's do.
int FileOf(const uint8_t* bytes, size_t size) {
  static const int fd = int(syscall(SYS_memfd_create, "fuzz", 0u));
  static const std::vector<uint8_t> zeros(4096, 0);
  if (fd < 0 || ftruncate(fd, 0) != 0 || ftruncate(fd, off_t(size)) != 0) __builtin_trap();
  for (size_t at = 0; at < size; at += zeros.size()) {
    const size_t n = std::min(zeros.size(), size - at);
    if (std::memcmp(bytes + at, zeros.data(), n) == 0) continue;
    if (pwrite(fd, bytes + at, n, off_t(at)) != ssize_t(n)) __builtin_trap();
  }
  return fd;
}

void CheckSnapshot(const gpuslice::core::Result<RegionSnapshot>& parsed,
                   RegionSnapshot::Part part) {
  if (!parsed.ok()) return;
  for (const auto& d : parsed->Devices()) {
    if (d.index >= rl::kMaxDevices || d.uuid.size() > rl::kUuidBytes) __builtin_trap();
    (void)parsed->FindDevice(d.uuid);
  }
  const auto processes = parsed->Processes();
  if (processes.size() > rl::kMaxProcesses) __builtin_trap();
  if (part == RegionSnapshot::Part::kDevices && !processes.empty()) __builtin_trap();
  for (const auto& p : processes) {
    if (p.slot >= rl::kMaxProcesses) __builtin_trap();
  }
  (void)parsed->limits_generation();
}

// Both parts through a descriptor (the size check, pread, the parse of the
// whole copy), and the header and entries from the bytes themselves.
void CheckRegion(const uint8_t* bytes, size_t size) {
  const int fd = FileOf(bytes, size);
  bool read_devices = false;
  for (RegionSnapshot::Part part : {RegionSnapshot::Part::kDevices, RegionSnapshot::Part::kAll}) {
    auto read = RegionSnapshot::ReadFrom(fd, "f", part);
    CheckSnapshot(read, part);
    // Only a file of the region's size reads through a descriptor.
    if (read.ok() && size != rl::kRegionSize) __builtin_trap();
    if (part == RegionSnapshot::Part::kDevices) read_devices = read.ok();
    // The process slots are read only where the header and entries are.
    if (part == RegionSnapshot::Part::kAll && read.ok() && !read_devices) __builtin_trap();
  }
  const size_t head = std::min<size_t>(size, rl::kProcessesOffset);
  auto parsed = RegionSnapshot::Parse(std::vector<unsigned char>(bytes, bytes + head), "f",
                                      RegionSnapshot::Part::kDevices);
  CheckSnapshot(parsed, RegionSnapshot::Part::kDevices);
  if (read_devices && !parsed.ok()) __builtin_trap();
}

void CheckMembers(const uint8_t* bytes, size_t size, uint64_t now_ns) {
  gpuslice::daemon::MembersHandle handle;
  handle.fd = dup(FileOf(bytes, size));
  gpuslice::daemon::GpuSeen seen[bd::kMembersPerSlice] = {};
  for (int round = 0; round < 2; ++round) {
    for (uint32_t device = 0; device < 2; ++device) {
      gpuslice::daemon::Report r = gpuslice::daemon::ReadReport(handle, device, now_ns, seen);
      // At most 1 s per member per read is ever charged.
      if (r.gpu_ns > uint64_t{bd::kMembersPerSlice} * 1'000'000'000ull) __builtin_trap();
      if (!r.live && (r.waiting || r.inflight || r.gpu_time)) __builtin_trap();
    }
  }
}  // The handle closes its descriptor (the dup).

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint64_t now_ns = 10'000'000'000ull;
  if (size == 0) return 0;
  if ((data[0] & 1) == 0) {
    CheckRegion(data + 1, size - 1);
    CheckMembers(data + 1, size - 1, now_ns);
    return 0;
  }
  static std::vector<uint8_t> region = ValidRegion();
  static std::vector<uint8_t> members = ValidMembers(now_ns);
  {
    Patched r(region, data, size);
    CheckRegion(r.data(), r.size());
  }
  Patched m(members, data, size);
  CheckMembers(m.data(), m.size(), now_ns);
  return 0;
}
