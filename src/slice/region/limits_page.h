#pragma once

// Create, update and read a slice's limits page (limits_layout.h,
// docs/SLICE_REGION.md): the daemon's decisions for one slice, per device.
//
// Who calls what:
// - the daemon: Create (filled privately, then linked into place), then
//   OpenForUpdate / Set* for live changes (resize, pause, share);
// - the shim, inside the job's processes: OpenReadOnly, which maps the page
//   PROT_READ and refuses a page the calling process could write, because a
//   page its own job can rewrite decides nothing.
//
// Thread safety: any number of threads and processes may read while the
// daemon writes; every control word is an atomic (limits_layout.h). Set* on
// one page are meant to come from one writer (the daemon's event loop);
// concurrent writers do not corrupt the page, they just race on the values.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "slice/region/limits_layout.h"
#include "slice/region/region.h"

namespace gpuslice::slice {

// What the daemon decided for one device of a slice.
struct DeviceControls {
  std::string uuid;  // "GPU-..." or "MIG-...".
  uint64_t limit_bytes = layout::kUnlimited;
  uint32_t share_milli = 0;  // 0..1000; 0: no compute share.
  ComputeMode mode = ComputeMode::kHard;
  core::Priority priority = core::Priority::kNormal;
  bool launches_paused = false;
};

struct LimitsOptions {
  std::string name;  // Informational, at most 63 bytes.
  uint64_t job_id = 0;
  uint32_t shared_gid = 0;  // LimitsHeader::shared_gid; 0: none.
  std::vector<DeviceControls> devices;  // At most layout::kMaxDevices, distinct UUIDs.
  // The file's mode. Never group/other-writable. A daemon running as root
  // uses 0644; one that is not root uses 0444 (its jobs run as its own
  // user, and the shim refuses a page its process could write).
  mode_t mode = 0644;
};

class LimitsPage {
 public:
  // Creates the page at `path` (AlreadyExists if present). The file is
  // filled in privately and then linked into place, so nobody ever maps a
  // half-written page.
  static core::Result<std::unique_ptr<LimitsPage>> Create(const std::string& path,
                                                          const LimitsOptions& options);
  // Opens an existing page read-write, for the daemon that created it. A
  // page the caller made read-only for itself (0444) is opened by lifting
  // its owner-write bit for the duration of the open(2) and putting it back.
  static core::Result<std::unique_ptr<LimitsPage>> OpenForUpdate(const std::string& path);
  // Maps an existing page PROT_READ, for the shim. PermissionDenied when the
  // calling process could write the file: owned by its effective uid with
  // the owner-write bit set (except for root, who can write any file
  // anyway), or writable by group or others. FailedPrecondition on a size,
  // magic or version this build does not read.
  static core::Result<std::unique_ptr<LimitsPage>> OpenReadOnly(const std::string& path);

  ~LimitsPage();
  LimitsPage(const LimitsPage&) = delete;
  LimitsPage& operator=(const LimitsPage&) = delete;

  const std::string& path() const { return path_; }
  bool writable() const { return writable_; }
  const layout::LimitsHeader& header() const { return *header_; }
  uint32_t device_count() const { return count_; }
  const layout::LimitsEntry& entry(uint32_t index) const;
  // The entry for `uuid` (SameUuid), or nullptr when the page does not list
  // it: such a device gets no memory.
  const layout::LimitsEntry* Find(std::string_view uuid) const;
  uint64_t generation() const { return header_->generation.load(std::memory_order_acquire); }

  // Every listed device with its current controls.
  std::vector<DeviceControls> Devices() const;

  // Live changes (daemon only: FailedPrecondition on a read-only mapping;
  // NotFound for a device the page does not list). Each bumps the
  // generation once.
  core::Status Set(const DeviceControls& controls);
  core::Status SetLimit(std::string_view uuid, uint64_t limit_bytes);
  core::Status SetLaunchesPaused(std::string_view uuid, bool paused);
  // The slice's suspension id (LimitsHeader::suspension; 0: not suspended,
  // or not resumed on demand). Stored with release order, so a process
  // that reads it after the device controls were set sees them.
  core::Status SetSuspension(uint64_t id);
  uint64_t suspension() const { return header_->suspension.load(std::memory_order_acquire); }
  // Moves the slice's device `from` to the GPU `to` (daemon only): the
  // entry keeps its index and controls, its UUID becomes `to` under the
  // entry's placement counter (limits_layout.h). Called while the slice's
  // processes are checkpointed; their compute gates follow (compute_gate.cc).
  // NotFound when `from` is not listed, AlreadyExists when `to` is.
  core::Status MoveDevice(std::string_view from, std::string_view to);

  // Entry `index`'s UUID and placement counter, read consistently against a
  // concurrent MoveDevice; false when a move was under way (try later).
  bool ReadPlacement(uint32_t index, std::string* uuid, uint32_t* placement) const;

 private:
  LimitsPage(std::string path, void* base, bool writable);
  static core::Result<std::unique_ptr<LimitsPage>> Map(const std::string& path, int fd,
                                                       bool writable);
  core::Result<layout::LimitsEntry*> Writable(std::string_view uuid);

  std::string path_;
  void* base_;
  bool writable_;
  layout::LimitsHeader* header_;
  uint32_t count_ = 0;  // Validated device_count, fixed at creation.
};

}  // namespace gpuslice::slice
