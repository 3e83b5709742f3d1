#pragma once

// The layout of a slice region: the shared-memory file through which every
// process of one slice (and the daemon that owns the slice) agrees on memory
// limits and usage. Documented in docs/SLICE_REGION.md; change anything here
// and bump kRegionVersion.
//
// The file is
//   RegionHeader                 (kHeaderSize bytes)
//   DeviceEntry[kMaxDevices]     (kDeviceEntrySize bytes each)
//   ProcessSlot[kMaxProcesses]   (kProcessSlotSize bytes each)
//
// Concurrency model (no locks anywhere, so no lock a dead process can hold):
// - The creator fills the whole file in a private temporary file and publishes
//   it with link(2), then nobody writes the immutable header fields again.
//   `magic` is additionally stored last with release order so a mapping that
//   sees the magic sees the rest.
// - Device entries and process slots are claimed with compare-and-swap on
//   their `state` word; a claimer records its pid so others can tell a stale
//   claim from a slow one.
// - Usage counters are std::atomic<uint64_t>, lock-free and address-free, so
//   they work across processes. Invariant kept by the admission code
//   (admission.h): for every device, `used_bytes` >= the sum of the live
//   slots' `used_bytes[d]` (the difference is memory whose owner died between
//   two atomic operations; it errs towards refusing, never towards overshoot).

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpuslice::slice::layout {

inline constexpr uint64_t kRegionMagic = 0x4e47455253555047ull;  // "GPUSREGN" little-endian.
inline constexpr uint32_t kRegionVersion = 1;

inline constexpr uint32_t kMaxDevices = 16;
inline constexpr uint32_t kMaxProcesses = 512;
inline constexpr uint32_t kUuidBytes = 64;  // NUL-terminated "GPU-xxxxxxxx-...".
inline constexpr uint32_t kNameBytes = 64;

inline constexpr uint32_t kHeaderSize = 512;
inline constexpr uint32_t kDeviceEntrySize = 384;
inline constexpr uint32_t kProcessSlotSize = 1024;

// A limit of kUnlimited means "count usage, refuse nothing".
inline constexpr uint64_t kUnlimited = ~0ull;

// RegionHeader::flags.
// A closed region (made by the daemon) lists every device the slice may use;
// a device it does not list gets no memory at all. An open region (made in
// standalone mode) gains an entry the first time a process uses a device.
inline constexpr uint32_t kFlagClosed = 1u << 0;

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// DeviceEntry::owner and ProcessSlot::owner hold an EntryState in the low 32
// bits and the pid of the process that claimed the entry in the high 32 bits,
// so one compare-and-swap both claims an entry and says who claimed it: a
// claim left behind by a dead process can be recognised and undone.
enum EntryState : uint32_t {
  kEntryEmpty = 0,       // Never used (device) / free (slot). Whole word is 0.
  kEntryClaiming = 1,    // Being filled in by the pid in the high bits.
  kEntryNamed = 2,       // Device: UUID written, checking for a duplicate claim.
  kEntryReady = 3,       // Device entry usable / process slot live.
  kEntryReclaiming = 4,  // Process slot: its usage is being returned.
};
constexpr uint64_t MakeOwner(int32_t pid, EntryState state) {
  return (uint64_t{static_cast<uint32_t>(pid)} << 32) | state;
}
constexpr EntryState OwnerState(uint64_t owner) { return static_cast<EntryState>(owner & 0xffffffffu); }
constexpr int32_t OwnerPid(uint64_t owner) { return static_cast<int32_t>(owner >> 32); }

struct RegionHeader {
  std::atomic<uint64_t> magic;  // kRegionMagic, published last.
  uint32_t version;             // kRegionVersion.
  uint32_t header_size;         // kHeaderSize.
  uint64_t total_size;          // Size of the whole file in bytes.
  uint32_t device_capacity;     // kMaxDevices.
  uint32_t process_capacity;    // kMaxProcesses.
  uint32_t device_entry_size;   // kDeviceEntrySize.
  uint32_t process_slot_size;   // kProcessSlotSize.
  uint64_t devices_offset;      // Byte offset of DeviceEntry[0].
  uint64_t processes_offset;    // Byte offset of ProcessSlot[0].
  uint32_t owner_uid;           // The slice's owner.
  uint32_t flags;               // kFlagClosed.
  uint64_t created_unix_ns;
  int32_t creator_pid;
  uint32_t reserved0;
  // Bumped (release) whenever a limit changes, so readers can cheaply notice.
  std::atomic<uint64_t> limits_generation;
  // Bumped (acq_rel) on every process slot claim; lets a sweeper detect that
  // a process joined while it was looking at an empty slice.
  std::atomic<uint64_t> slot_claims;
  char slice_name[kNameBytes];  // NUL-terminated, informational.
  uint8_t reserved1[32];
  // A process of a suspended daemon slice that makes a CUDA call stores
  // here the suspension id it read from the limits page
  // (LimitsHeader::suspension): "resume this job". The daemon reads it as
  // untrusted input (pread) and honours it only when it equals the current
  // suspension's id; it never writes it. On a cache line of its own, apart
  // from the counters the processes update. Formerly reserved zero bytes:
  // the version is unchanged.
  std::atomic<uint64_t> resume_request;
  uint8_t reserved[kHeaderSize - 200];
};
static_assert(offsetof(RegionHeader, magic) == 0);
static_assert(offsetof(RegionHeader, version) == 8);
static_assert(offsetof(RegionHeader, total_size) == 16);
static_assert(offsetof(RegionHeader, devices_offset) == 40);
static_assert(offsetof(RegionHeader, processes_offset) == 48);
static_assert(offsetof(RegionHeader, owner_uid) == 56);
static_assert(offsetof(RegionHeader, created_unix_ns) == 64);
static_assert(offsetof(RegionHeader, limits_generation) == 80);
static_assert(offsetof(RegionHeader, slot_claims) == 88);
static_assert(offsetof(RegionHeader, slice_name) == 96);
static_assert(offsetof(RegionHeader, resume_request) == 192);
static_assert(sizeof(RegionHeader) == kHeaderSize);

// One device of the slice, keyed by UUID. Limit and usage sit on separate
// cache lines: the limit is read-mostly, the usage is the contended counter.
struct alignas(64) DeviceEntry {
  std::atomic<uint64_t> owner;  // MakeOwner(claimer pid, EntryState).
  char uuid[kUuidBytes];        // "GPU-..." or "MIG-...", NUL-terminated.
  // The memory one fresh context takes on this device, as the first process
  // of the slice learnt it from NVML; 0: not learnt yet. Later processes
  // charge it for their first context instead of initialising NVML (about
  // 0.1-0.4 ms each). Was reserved (zero) space: version unchanged.
  std::atomic<uint64_t> context_bytes;
  // Who learns context_bytes: 0 nobody yet; kContextLearnt once
  // context_bytes holds the learnt size (0 included); else the learner's
  // LearnerWord (context_charge.h) while it creates the slice's first
  // context on this device, holding all the room left under the limit.
  // Was reserved (zero) space: version unchanged.
  std::atomic<uint64_t> context_learner;
  uint8_t reserved0[40];
  // Line 2: the limit, written by the daemon (live resize) or the creator.
  std::atomic<uint64_t> limit_bytes;  // kUnlimited or a byte count.
  uint8_t reserved1[56];
  // Line 3: the admission counter.
  std::atomic<uint64_t> used_bytes;  // Charged to the whole slice.
  std::atomic<uint64_t> peak_bytes;  // High-water mark of used_bytes.
  // Allocations the shim refused for the limit (monitoring counter). Bumped
  // on the refusal path only, next to the counter that path just read.
  // Was reserved (zero) space: version unchanged.
  std::atomic<uint64_t> refused_allocs;
  uint8_t reserved2[40];
  // Line 4: the compute share, read by every process's gate tick.
  std::atomic<uint32_t> compute_share_milli;  // 0: no compute cap.
  std::atomic<uint32_t> priority;             // core::Priority.
  std::atomic<uint32_t> compute_mode;         // 0: none.
  // Non-zero: the gate holds new launches of this slice on this device until
  // it is cleared (the daemon's idle reclaim). Was reserved3 (zero).
  std::atomic<uint32_t> launches_paused;
  uint8_t reserved4[48];
  // Line 6: nanoseconds launches of the slice waited in the gate for a turn
  // or for the share's budget (monitoring counter). Written on the launch
  // slow path only, on a line of its own so that it disturbs no reader of
  // the limit or the share. Was reserved (zero) space.
  std::atomic<uint64_t> throttled_ns;
  uint8_t reserved5[56];
};
static_assert(offsetof(DeviceEntry, uuid) == 8);
static_assert(offsetof(DeviceEntry, context_bytes) == 72);
static_assert(offsetof(DeviceEntry, context_learner) == 80);
static_assert(offsetof(DeviceEntry, limit_bytes) == 128);
static_assert(offsetof(DeviceEntry, used_bytes) == 192);
static_assert(offsetof(DeviceEntry, peak_bytes) == 200);
static_assert(offsetof(DeviceEntry, refused_allocs) == 208);
static_assert(offsetof(DeviceEntry, compute_share_milli) == 256);
static_assert(offsetof(DeviceEntry, launches_paused) == 268);
static_assert(offsetof(DeviceEntry, throttled_ns) == 320);
static_assert(sizeof(DeviceEntry) == kDeviceEntrySize);

// One process of the slice. `used_bytes[d]` is what this process holds on
// the slice's device d (allocations plus context/module memory);
// `overhead_bytes[d]` is the part of it that is context/module memory,
// including what is reserved for a context from before its creation.
struct alignas(64) ProcessSlot {
  std::atomic<uint64_t> owner;  // MakeOwner(pid, EntryState).
  uint64_t start_time;          // Process start, clock ticks since boot (0: unknown).
  uint64_t claimed_unix_ns;
  // The claimer's PID namespace (inode): the owner's pid is its pid there,
  // which a reader in another namespace translates (slice/base/pid_namespace.h).
  // 0 (regions of older builds): the reader's own namespace.
  uint64_t pid_ns;
  uint8_t reserved0[32];
  std::atomic<uint64_t> used_bytes[kMaxDevices];
  std::atomic<uint64_t> overhead_bytes[kMaxDevices];
  // Reserved for the compute-share part.
  std::atomic<uint64_t> launches[kMaxDevices];
  std::atomic<uint64_t> busy_ns[kMaxDevices];
  uint8_t reserved1[kProcessSlotSize - 576];
};
static_assert(offsetof(ProcessSlot, start_time) == 8);
static_assert(offsetof(ProcessSlot, pid_ns) == 24);
static_assert(offsetof(ProcessSlot, used_bytes) == 64);
static_assert(offsetof(ProcessSlot, overhead_bytes) == 64 + 8 * kMaxDevices);
static_assert(offsetof(ProcessSlot, launches) == 64 + 16 * kMaxDevices);
static_assert(offsetof(ProcessSlot, busy_ns) == 64 + 24 * kMaxDevices);
static_assert(sizeof(ProcessSlot) == kProcessSlotSize);

inline constexpr uint64_t kDevicesOffset = kHeaderSize;
inline constexpr uint64_t kProcessesOffset = kDevicesOffset + uint64_t{kDeviceEntrySize} * kMaxDevices;
inline constexpr uint64_t kRegionSize = kProcessesOffset + uint64_t{kProcessSlotSize} * kMaxProcesses;
static_assert(kDevicesOffset % 64 == 0 && kProcessesOffset % 64 == 0);
static_assert(kRegionSize == 512 + 6144 + 524288);

}  // namespace gpuslice::slice::layout
