#pragma once

// The layout of a slice's limits page: what the daemon decided for one slice
// (memory limit, compute share, mode, priority, launch pause per device).
// Documented in docs/SLICE_REGION.md ("The limits page"); change anything
// here and bump kLimitsVersion.
//
// Trust: the page is written only by the daemon. It lives in a directory the
// job cannot write, belongs to the daemon's user and is never writable by
// the job; the shim maps it PROT_READ and refuses a page it could write
// (limits_page.h). What the job reports (usage, pids) lives in the slice
// region (region_layout.h), which the job owns; the daemon never takes a
// decision back from there.
//
// The file is one 4 KiB page:
//   LimitsHeader                 (kLimitsHeaderSize bytes)
//   LimitsEntry[kMaxDevices]     (kLimitsEntrySize bytes each)
//   reserved                     (zero up to kLimitsPageSize)
//
// Concurrency: the daemon fills the whole file privately and publishes it
// with link(2) (as Region::Create does); `magic` is stored last with release
// order. The device list (count, UUIDs) never changes afterwards. The
// control words are atomics the daemon stores and every process of the slice
// loads without locks: a memory limit is read with relaxed order on every
// allocation (any value is a valid limit; admission.h); the share is stored
// last with release order after mode and priority, and the pause flag on its
// own, both paired with acquire loads in the compute gate.

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "slice/region/region_layout.h"

namespace gpuslice::slice::layout {

inline constexpr uint64_t kLimitsMagic = 0x544d494c53555047ull;  // "GPUSLIMT" little-endian.
inline constexpr uint32_t kLimitsVersion = 1;

inline constexpr uint32_t kLimitsHeaderSize = 256;
inline constexpr uint32_t kLimitsEntrySize = 128;
inline constexpr uint64_t kLimitsPageSize = 4096;

// LimitsHeader::flags. Closed: a device the page does not list gets no
// memory. The daemon always sets it; the shim treats a page without it the
// same way (a limits page never grants what it does not list).
inline constexpr uint32_t kLimitsFlagClosed = 1u << 0;

struct LimitsHeader {
  std::atomic<uint64_t> magic;  // kLimitsMagic, published last.
  uint32_t version;             // kLimitsVersion.
  uint32_t header_size;         // kLimitsHeaderSize.
  uint64_t total_size;          // kLimitsPageSize.
  uint32_t device_capacity;     // kMaxDevices.
  uint32_t entry_size;          // kLimitsEntrySize.
  uint64_t entries_offset;      // Byte offset of LimitsEntry[0].
  uint32_t flags;               // kLimitsFlagClosed.
  uint32_t device_count;        // Entries 0..device_count-1 are the slice's devices.
  uint64_t created_unix_ns;
  // The daemon's job id; 0: none (tests).
  uint64_t job_id;
  // +1 (release) after every change of any control word, so a reader can
  // tell cheaply that something changed.
  std::atomic<uint64_t> generation;
  char slice_name[kNameBytes];  // NUL-terminated, informational.
  // The slice's own group (formerly reserved zero bytes; 0: none): set for
  // slices whose processes run as a uid nobody knows in advance (a
  // Kubernetes container). The region and members file then belong to this
  // group with mode 0660, the container gets the group as a supplementary
  // one (CDI additionalGids), and the shim accepts a region writable by this
  // group and no other (docs/SLICE_REGION.md, docs/SECURITY.md).
  uint32_t shared_gid;
  uint32_t reserved0;
  // Non-zero while the daemon holds the slice suspended and honours a
  // request to resume it (docs/SUSPEND.md, "Resume on demand"): the
  // suspension's id, which a process that wants the GPU copies into its
  // region's RegionHeader::resume_request. 0 while it runs, and when the
  // daemon does not resume on demand. Stored (release) after the device
  // entries when the slice is suspended and when its limits come back, so
  // a process that sees 0 after a resume sees the limits restored. Formerly
  // reserved zero bytes: pages of older daemons read as "never resumes on
  // demand", so the version is unchanged.
  std::atomic<uint64_t> suspension;
  uint8_t reserved[kLimitsHeaderSize - 152];
};
static_assert(offsetof(LimitsHeader, magic) == 0);
static_assert(offsetof(LimitsHeader, version) == 8);
static_assert(offsetof(LimitsHeader, header_size) == 12);
static_assert(offsetof(LimitsHeader, total_size) == 16);
static_assert(offsetof(LimitsHeader, device_capacity) == 24);
static_assert(offsetof(LimitsHeader, entry_size) == 28);
static_assert(offsetof(LimitsHeader, entries_offset) == 32);
static_assert(offsetof(LimitsHeader, flags) == 40);
static_assert(offsetof(LimitsHeader, device_count) == 44);
static_assert(offsetof(LimitsHeader, created_unix_ns) == 48);
static_assert(offsetof(LimitsHeader, job_id) == 56);
static_assert(offsetof(LimitsHeader, generation) == 64);
static_assert(offsetof(LimitsHeader, slice_name) == 72);
static_assert(offsetof(LimitsHeader, shared_gid) == 136);
static_assert(offsetof(LimitsHeader, suspension) == 144);
static_assert(sizeof(LimitsHeader) == kLimitsHeaderSize);

// One device of the slice: its UUID (line 1) and the daemon's decisions for
// it (line 2, read by every process of the slice). The UUID changes only
// when the daemon moves a suspended slice to another GPU (docs/SUSPEND.md),
// under the `placement` sequence counter: odd while the UUID is rewritten,
// +2 per move, so a reader copies the UUID between two equal even loads. The
// encodings of compute_mode and priority are those of the region's
// DeviceEntry (shim/base/config.h: kRegionMode*, kRegionPriorityDefault), so the
// compute gate reads either the same way.
struct alignas(64) LimitsEntry {
  char uuid[kUuidBytes];                      // "GPU-..." or "MIG-...", NUL-terminated.
  std::atomic<uint64_t> limit_bytes;          // kUnlimited or a byte count.
  std::atomic<uint32_t> compute_share_milli;  // 0..1000; 0: no compute cap.
  std::atomic<uint32_t> priority;             // 0: normal; else core::Priority + 1.
  std::atomic<uint32_t> compute_mode;         // 0: hard; 2: work-conserving.
  std::atomic<uint32_t> launches_paused;      // Non-zero: hold new launches.
  // The UUID's sequence counter (above). Was reserved (zero) space: pages
  // of older daemons read as never moved, so the version is unchanged.
  std::atomic<uint32_t> placement;
  uint8_t reserved[kLimitsEntrySize - 92];
};
static_assert(offsetof(LimitsEntry, uuid) == 0);
static_assert(offsetof(LimitsEntry, limit_bytes) == 64);
static_assert(offsetof(LimitsEntry, compute_share_milli) == 72);
static_assert(offsetof(LimitsEntry, priority) == 76);
static_assert(offsetof(LimitsEntry, compute_mode) == 80);
static_assert(offsetof(LimitsEntry, launches_paused) == 84);
static_assert(offsetof(LimitsEntry, placement) == 88);
static_assert(sizeof(LimitsEntry) == kLimitsEntrySize);

inline constexpr uint64_t kLimitsEntriesOffset = kLimitsHeaderSize;
static_assert(kLimitsEntriesOffset + uint64_t{kLimitsEntrySize} * kMaxDevices <= kLimitsPageSize);
static_assert(kLimitsEntriesOffset % 64 == 0);

}  // namespace gpuslice::slice::layout
