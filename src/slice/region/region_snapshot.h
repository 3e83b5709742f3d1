#pragma once

// A copy of a slice region (region_layout.h), taken with pread(2) and parsed
// with bounds checks: how the daemon reads what a job reports
// (docs/SLICE_REGION.md, "For the daemon"; docs/SECURITY.md).
//
// The region is the job's file. It may rewrite, truncate, regrow or remove
// it at any moment; a reader that goes through a mapping of it dies of
// SIGBUS when the file shrinks under it (a job can kill the root daemon in
// 1-7 s, and the restarted daemon in the same second). A copy
// cannot fault. Whatever bytes it holds parse to devices and processes, or
// to an error that means "no report"; nothing read here is ever a decision.
//
// The shim keeps its own mapping (slice::Region): the file is its own job's.
//
// Thread safety: a snapshot is an immutable value; any thread may read it.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "slice/region/region.h"

namespace gpuslice::slice {

class RegionSnapshot {
 public:
  // How much of the file to copy: the header and the device entries
  // (kProcessesOffset bytes, what usage needs), or the whole region (process
  // slots too, 518 KiB).
  enum class Part { kDevices, kAll };

  // Opens `path` read-only, without following a link and without waiting
  // (O_NONBLOCK: a lease the job holds on its file answers EWOULDBLOCK
  // instead of stalling the reader for the lease-break time), and copies
  // `part`. Errors: NotFound (vanished), FailedPrecondition (not a file,
  // short, another size, bad magic or version), Unavailable (leased),
  // others from open/pread.
  static core::Result<RegionSnapshot> Read(const std::string& path, Part part);
  // The same from an open descriptor; `path` names it in errors.
  static core::Result<RegionSnapshot> ReadFrom(int fd, const std::string& path, Part part);
  // Parses `bytes`, the start of a region file (possibly short, possibly
  // anything): checks the header as Region::Open does.
  static core::Result<RegionSnapshot> Parse(std::vector<unsigned char> bytes,
                                            const std::string& path, Part part);

  // The ready device entries, in index order, with what the job reports
  // there. `limit_bytes` and `launches_paused` are the region's own fields:
  // the job's to write, a decision only for a standalone slice or one of an
  // older daemon.
  std::vector<DeviceUsage> Devices() const;
  // The live process slots (Part::kAll only; empty otherwise), pids named in
  // the reader's PID namespace where it can tell (slice/base/pid_namespace.h).
  std::vector<ProcessUsage> Processes() const;
  // The index of the ready device entry named `uuid` (SameUuid).
  core::Result<uint32_t> FindDevice(std::string_view uuid) const;
  // The header's limits generation (the legacy writer bumps it).
  uint64_t limits_generation() const;

 private:
  RegionSnapshot(std::vector<unsigned char> bytes, std::string path, Part part)
      : bytes_(std::move(bytes)), path_(std::move(path)), part_(part) {}
  template <typename T>
  T Field(uint64_t offset) const;

  std::vector<unsigned char> bytes_;  // Exactly the bytes `part_` needs.
  std::string path_;
  Part part_;
};

// Where each field the daemon writes into a region of an older daemon's
// slice lives (region_layout.h), for pwrite(2): the byte offset of
// DeviceEntry `index`'s field at `field_offset`.
constexpr uint64_t DeviceFieldOffset(uint32_t index, uint64_t field_offset) {
  return layout::kDevicesOffset + uint64_t{index} * layout::kDeviceEntrySize + field_offset;
}

}  // namespace gpuslice::slice
