#pragma once

// Create, open, resize, inspect and sweep a slice region (region_layout.h,
// docs/SLICE_REGION.md). Used by the shim inside CUDA processes and by the
// daemon, which creates a slice's region, reads what the job reports there
// (usage, pids) and removes it.
//
// Where a device's limit, compute share, mode, priority and pause flag are
// read: a standalone region carries its own (the fields of its DeviceEntry);
// a daemon slice's come from the daemon's read-only limits page
// (limits_page.h), attached with AttachLimits, because the region belongs
// to the job and a job can rewrite it. Every reader goes through LimitOf,
// ShareOf, ModeOf, PriorityOf and LaunchesPausedOf, which know which.
//
// Thread safety: a Region may be used from any number of threads and
// processes at once; every mutation is a compare-and-swap or an atomic
// add on the shared mapping. Nothing here takes a lock.

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "slice/region/region_layout.h"

namespace gpuslice::slice {

class LimitsPage;

// Seam over "is this process still alive?" so sweeping can be tested
// without killing anything.
class ProcessProbe {
 public:
  virtual ~ProcessProbe() = default;
  // `start_time` 0 means unknown: only the pid is checked.
  virtual bool IsAlive(int32_t pid, uint64_t start_time) const = 0;
};

// kill(pid, 0) plus a start-time comparison, so a reused pid is not mistaken
// for the process that held the slot. A pid we may not signal (EPERM) or
// whose /proc entry we cannot read counts as alive.
const ProcessProbe& RealProcessProbe();

// Start time of `pid` in clock ticks since boot (/proc/<pid>/stat field 22).
core::Result<uint64_t> ProcessStartTime(int32_t pid);

// DeviceEntry::compute_mode as the API sees it (stored as 0 and 2; 0 is
// also what a creator that sets only the share leaves: hard).
enum class ComputeMode { kHard, kWorkConserving };

struct DeviceLimit {
  std::string uuid;  // "GPU-..." or "MIG-...".
  uint64_t limit_bytes = layout::kUnlimited;
};

struct RegionOptions {
  std::string name;                  // Informational, at most 63 bytes.
  bool closed = false;               // layout::kFlagClosed.
  std::vector<DeviceLimit> devices;  // At most layout::kMaxDevices.
  mode_t mode = 0600;                // Group/other write bits are refused.
};

struct DeviceUsage {
  uint32_t index = 0;
  std::string uuid;
  uint64_t limit_bytes = 0;  // LimitOf(index): the limits page's when one is attached.
  uint64_t used_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t refused_allocs = 0;  // Allocations refused for the limit (counter).
  uint64_t throttled_ns = 0;    // Time launches waited in the compute gate (counter).
  bool launches_paused = false;  // LaunchesPausedOf(index).
};

struct ProcessUsage {
  uint32_t slot = 0;
  int32_t pid = 0;
  std::array<uint64_t, layout::kMaxDevices> used_bytes{};
  std::array<uint64_t, layout::kMaxDevices> overhead_bytes{};
};

// True when two device UUIDs name the same device. The "GPU-"/"MIG-" prefix
// and letter case are ignored: cuDeviceGetUuid gives 16 raw bytes and does
// not say which prefix NVML would print.
bool SameUuid(std::string_view a, std::string_view b);

class Region {
 public:
  // Creates a region at `path`. The file is filled in privately and then
  // linked into place, so nobody ever maps a half-initialised region.
  // AlreadyExists if `path` exists.
  static core::Result<std::unique_ptr<Region>> Create(const std::string& path,
                                                      const RegionOptions& options);
  // Opens an existing region; checks ownership (the caller's uid or root),
  // permissions (not group/world-writable), size, magic and version.
  // `shared_gid` (from the daemon's limits page, never from the region): a
  // region of that group, writable by it and not by others, is accepted
  // whoever owns it (a slice whose processes' uid is not known in advance).
  static core::Result<std::unique_ptr<Region>> Open(const std::string& path,
                                                    uint32_t shared_gid = 0);
  // Open, or Create when missing; when two processes race, one creates and
  // the other opens the winner's file.
  static core::Result<std::unique_ptr<Region>> OpenOrCreate(const std::string& path,
                                                            const RegionOptions& options);
  // Unlinks the file. Processes that have it mapped keep working on their
  // mapping; new processes will not find it.
  static core::Status Remove(const std::string& path);

  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  const std::string& path() const { return path_; }
  layout::RegionHeader& header() const { return *header_; }
  layout::DeviceEntry& device(uint32_t index) const;
  layout::ProcessSlot& slot(uint32_t index) const;
  // Closed: the slice may use only the devices listed. A region with a
  // limits page attached is closed whatever its (job-writable) flag says.
  bool closed() const {
    return limits_ != nullptr || limits_refused_ || (header_->flags & layout::kFlagClosed) != 0;
  }

  // Takes the slice's limits, shares, modes, priorities and pause flags from
  // `page` (the daemon's limits page, mapped read-only) instead of this
  // region, for every device. Each region device is matched to its page
  // entry by UUID once, here; a device the page does not list, or one added
  // to the region later, gets no memory, no share and no pause. A null
  // `page` (the page could not be used: missing, writable by us, another
  // version) does the same for every device: the slice gets no memory
  // rather than no limit. Call once, before the region is shared with other
  // threads.
  void AttachLimits(std::unique_ptr<LimitsPage> page);
  bool has_limits_page() const { return limits_ != nullptr; }
  // The limits page's suspension word (LimitsHeader::suspension: non-zero
  // while the daemon holds the slice suspended and resumes it on demand),
  // or null without a page: a standalone slice is never suspended.
  const std::atomic<uint64_t>* SuspensionWord() const;

  // The controls of slice device `index` (< kMaxDevices), from wherever they
  // live (see the top of this file). One pointer load and one atomic load
  // each, so the allocation path can call LimitOf on every allocation.
  // Relaxed for the limit: any value is a valid limit (admission.h).
  uint64_t LimitOf(uint32_t index) const {
    return controls_[index].limit->load(std::memory_order_relaxed);
  }
  // Acquire: pairs with the release store of the share, made after mode and
  // priority (SetComputeShare, LimitsPage::Set), so ModeOf/PriorityOf read
  // after it see the settings that go with it.
  uint32_t ShareOf(uint32_t index) const {
    return controls_[index].share->load(std::memory_order_acquire);
  }
  // The stored encodings (shim/base/config.h: kRegionMode*, kRegionPriorityDefault).
  uint32_t ModeOf(uint32_t index) const {
    return controls_[index].mode->load(std::memory_order_relaxed);
  }
  uint32_t PriorityOf(uint32_t index) const {
    return controls_[index].priority->load(std::memory_order_relaxed);
  }
  // Acquire: pairs with the release in SetLaunchesPaused (either source).
  bool LaunchesPausedOf(uint32_t index) const {
    return controls_[index].paused->load(std::memory_order_acquire) != 0;
  }

  // The index of the ready device entry for `uuid`; NotFound if none.
  core::Result<uint32_t> FindDevice(std::string_view uuid) const;
  // FindDevice, or (open regions only) adds an entry with `limit_bytes`.
  // Two processes adding the same UUID at once end up with one entry.
  // A closed region answers NotFound for a device it does not list.
  core::Result<uint32_t> FindOrAddDevice(std::string_view uuid, uint64_t limit_bytes);
  // The Set* below write this region's own fields: they decide for a
  // standalone slice (and for a slice of an older daemon, which has no
  // limits page); a process with a limits page attached ignores them.
  //
  // Live resize: the next admission on that device sees the new limit.
  // Lowering below current usage refuses new allocations until usage drops.
  core::Status SetLimit(std::string_view uuid, uint64_t limit_bytes);
  // Live change of the device's compute share (0..1000 milli, 0: none),
  // mode and priority: every process of the slice follows it within one
  // control period, without a restart.
  core::Status SetComputeShare(std::string_view uuid, uint32_t share_milli, ComputeMode mode,
                               core::Priority priority);

  // Holds (true) or releases (false) new launches of the slice on that
  // device: every process's launch gate follows within one background tick
  // (5 ms idle); a launch already waiting resumes when it is released. The
  // daemon's idle reclaim uses it to stop a slice launching new work.
  core::Status SetLaunchesPaused(std::string_view uuid, bool paused);
  // Renames the slice's device `from` to `to` (the daemon, when it moves a
  // suspended slice to another GPU; LimitsPage::MoveDevice is the
  // authoritative half). The entry keeps its index and its counters, which
  // the job's processes keep charging under the same index.
  core::Status RenameDevice(std::string_view from, std::string_view to);

  // Where slice device `index` is now: the limits page's UUID and placement
  // counter when a page is attached (false while the daemon is moving it),
  // else the region's own UUID with placement 0.
  bool PlacementOf(uint32_t index, std::string* uuid, uint32_t* placement) const;
  // Just the placement counter (one acquire load): what the compute gate
  // checks every tick before it reads the UUID.
  uint32_t PlacementSeqOf(uint32_t index) const;

  // Claims a free process slot for `pid`; sweeps dead processes first if
  // none is free. ResourceExhausted when the slice is full of live ones.
  core::Result<uint32_t> ClaimSlot(int32_t pid, uint64_t start_time);
  // Returns everything the slot holds to its devices and frees it. Only the
  // owner calls this (at exit); a no-op if the slot was already reclaimed.
  void ReleaseSlot(uint32_t index, int32_t pid);
  // Reclaims the slots of dead processes (and claims abandoned by dead
  // claimers). Returns how many slots were reclaimed.
  uint32_t Sweep(const ProcessProbe& probe);

  std::vector<DeviceUsage> Devices() const;
  std::vector<ProcessUsage> Processes() const;

 private:
  Region(std::string path, void* base);
  // Returns a dead slot's usage and frees it, if `owner` is still its owner.
  bool Reclaim(uint32_t index, uint64_t owner);

  // Where each device's controls are read (see LimitOf).
  struct Controls {
    const std::atomic<uint64_t>* limit;
    const std::atomic<uint32_t>* share;
    const std::atomic<uint32_t>* mode;
    const std::atomic<uint32_t>* priority;
    const std::atomic<uint32_t>* paused;
  };

  std::string path_;
  void* base_;
  layout::RegionHeader* header_;
  std::array<Controls, layout::kMaxDevices> controls_;
  // The limits page entry each device matched at AttachLimits; -1: none.
  std::array<int32_t, layout::kMaxDevices> page_index_;
  std::unique_ptr<LimitsPage> limits_;  // Null: the region's own fields.
  bool limits_refused_ = false;         // AttachLimits(nullptr): nothing is granted.
};

}  // namespace gpuslice::slice
