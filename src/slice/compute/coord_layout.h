#pragma once

// The per-GPU coordination file: the state every compute-limited slice on
// one GPU shares so that their turns on the GPU can be scheduled (shares,
// work-conserving give-back, priority). Documented in docs/COMPUTE.md;
// change anything here and bump kCoordVersion.
//
// The file is
//   CoordHeader              (kCoordHeaderSize bytes)
//   SliceEntry[kMaxSlices]   (kSliceEntrySize bytes each)
//   MemberEntry[kMaxMembers] (kMemberEntrySize bytes each)
//
// Concurrency model:
// - Every scheduling decision is taken under `lock`, a lease: the word holds
//   the taker's pid and `lock_since_ns` when it took it; a lease older than
//   kLeaseNs is broken by the next taker, so a process that dies (or stops)
//   inside a decision stalls the others for at most kLeaseNs. Decisions are
//   a few microseconds of arithmetic, no system call but the futex wake.
// - What a launching thread reads (`holder`, `turn_state`, `turn_seq`) is
//   atomic and written only under the lease; readers never take it.
// - Members write only their own entry (heartbeat, flags), with atomics.
// - A member whose heartbeat is older than kMemberTimeoutNs is dead to the
//   scheduler (a SIGKILLed process, a stopped one): its slice stops being
//   waited for and the entry is reclaimed.

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpuslice::slice::coord {

inline constexpr uint64_t kCoordMagic = 0x44524f4353555047ull;  // "GPUSCORD" little-endian.
inline constexpr uint32_t kCoordVersion = 1;

inline constexpr uint32_t kMaxSlices = 32;
inline constexpr uint32_t kMaxMembers = 128;
inline constexpr uint32_t kCoordHeaderSize = 512;
inline constexpr uint32_t kSliceEntrySize = 128;
inline constexpr uint32_t kMemberEntrySize = 64;

inline constexpr uint64_t kLeaseNs = 20'000'000;          // 20 ms.
inline constexpr uint64_t kMemberTimeoutNs = 300'000'000;  // 300 ms.

// CoordHeader::turn_state.
enum TurnState : uint32_t {
  kTurnNone = 0,     // Nobody holds the GPU.
  kTurnOpen = 1,     // `holder` may launch.
  kTurnClosing = 2,  // `holder` must not launch; waiting for its work to drain.
};

// SliceEntry::mode.
enum Mode : uint32_t { kModeHard = 0, kModeWorkConserving = 1 };

// MemberEntry::flags.
inline constexpr uint32_t kMemberWaiting = 1u << 0;   // A launch waits for the turn.
inline constexpr uint32_t kMemberInflight = 1u << 1;  // Launched work not known complete.
// The member adds the GPU time its work used to its slice's `gpu_ns`
// (the slice is then charged that rather than wall time in flight).
inline constexpr uint32_t kMemberGpuTime = 1u << 2;

// SliceEntry::flags. Zero in a file of an older shim: no co-running, no duty
// measured yet.
inline constexpr uint32_t kSliceCoRun = 1u << 0;         // May launch beside the holder.
inline constexpr uint32_t kSliceDutyMeasured = 1u << 1;  // duty_milli holds a measurement.
inline constexpr uint32_t kSliceHostDutyMeasured = 1u << 2;  // host_duty_milli holds one.

// CoordHeader::turn_flags.
inline constexpr uint32_t kTurnHandedOff = 1u << 0;  // TurnView::handed_off.

struct CoordHeader {
  std::atomic<uint64_t> magic;  // kCoordMagic, published last.
  uint32_t version;             // kCoordVersion.
  uint32_t header_size;         // kCoordHeaderSize.
  uint64_t total_size;
  uint32_t slice_capacity;   // kMaxSlices.
  uint32_t member_capacity;  // kMaxMembers.
  uint32_t slice_entry_size;
  uint32_t member_entry_size;
  uint64_t created_unix_ns;
  char uuid[64];  // The GPU (or MIG instance) this file coordinates.
  uint8_t reserved0[16];
  // Line 3 (offset 128): the decision lease.
  std::atomic<uint64_t> lock;           // (pid << 32) | 1 while held, 0 free.
  std::atomic<uint64_t> lock_since_ns;  // CLOCK_MONOTONIC when taken.
  std::atomic<uint64_t> last_tick_ns;   // Last decision (token accrual base).
  uint8_t reserved1[40];
  // Line 4 (offset 192): the turn. Read by launching threads.
  std::atomic<uint32_t> turn_seq;    // +1 on every change; the futex word.
  std::atomic<int32_t> holder;       // Slice index, -1: none.
  std::atomic<uint32_t> turn_state;  // TurnState.
  // kTurn* flags (in bytes reserved, zero, in an older file: a turn of such
  // a file is not handed off).
  std::atomic<uint32_t> turn_flags;
  std::atomic<uint64_t> turn_start_ns;
  std::atomic<uint64_t> turn_end_ns;
  std::atomic<uint64_t> turns;  // Number of turns granted (statistics).
  std::atomic<uint64_t> preemptions;
  uint8_t reserved3[kCoordHeaderSize - 240];
};
static_assert(offsetof(CoordHeader, version) == 8);
static_assert(offsetof(CoordHeader, total_size) == 16);
static_assert(offsetof(CoordHeader, created_unix_ns) == 40);
static_assert(offsetof(CoordHeader, uuid) == 48);
static_assert(offsetof(CoordHeader, lock) == 128);
static_assert(offsetof(CoordHeader, last_tick_ns) == 144);
static_assert(offsetof(CoordHeader, turn_seq) == 192);
static_assert(offsetof(CoordHeader, holder) == 196);
static_assert(offsetof(CoordHeader, turn_flags) == 204);
static_assert(offsetof(CoordHeader, turn_start_ns) == 208);
static_assert(offsetof(CoordHeader, preemptions) == 232);
static_assert(sizeof(CoordHeader) == kCoordHeaderSize);

// One slice using the GPU. Written under the lease, except the
// configuration, which any member of the slice refreshes from its region.
struct alignas(64) SliceEntry {
  std::atomic<uint64_t> key;  // Identifies the slice (hash of its region); 0: free.
  std::atomic<uint32_t> share_milli;
  std::atomic<uint32_t> mode;      // Mode.
  std::atomic<uint32_t> priority;  // core::Priority (0 low, 1 normal, 2 high).
  std::atomic<uint32_t> flags;     // kSlice* (reserved, zero, in older files).
  std::atomic<int64_t> tokens_ns;    // Hard cap budget; overuse makes it negative.
  std::atomic<uint64_t> vtime;       // Charged ns x 1000 / share: fair-share order.
  std::atomic<uint64_t> charged_ns;  // Total GPU time charged (statistics).
  std::atomic<uint64_t> idle_since_ns;  // When it last stopped wanting the GPU; 0: wants.
  // In bytes reserved (zero) in older files: the GPU time its
  // members' work used, added by them, and how much of it decisions have
  // charged so far.
  std::atomic<uint64_t> gpu_ns;
  std::atomic<uint64_t> gpu_seen_ns;
  // Also in bytes reserved in older files: its duty (SliceView::duty_milli,
  // valid with kSliceDutyMeasured) and host duty (host_duty_milli, valid with
  // kSliceHostDutyMeasured), and the windows being measured.
  std::atomic<uint32_t> duty_milli;
  std::atomic<uint32_t> host_duty_milli;
  std::atomic<uint64_t> duty_wall_ns;
  std::atomic<uint64_t> duty_gpu_ns;
  std::atomic<uint64_t> host_wall_ns;
  std::atomic<uint64_t> host_gpu_ns;
  std::atomic<uint64_t> host_measured_ns;  // When a host duty window last completed.
  // In bytes reserved (zero) in older files: SliceView::woke_ns (0: no
  // request waits for a hand-off).
  std::atomic<uint64_t> woke_ns;
  uint8_t reserved2[kSliceEntrySize - 128];
};
static_assert(offsetof(SliceEntry, share_milli) == 8);
static_assert(offsetof(SliceEntry, tokens_ns) == 24);
static_assert(offsetof(SliceEntry, vtime) == 32);
static_assert(offsetof(SliceEntry, idle_since_ns) == 48);
static_assert(offsetof(SliceEntry, gpu_ns) == 56);
static_assert(offsetof(SliceEntry, gpu_seen_ns) == 64);
static_assert(offsetof(SliceEntry, flags) == 20);
static_assert(offsetof(SliceEntry, duty_milli) == 72);
static_assert(offsetof(SliceEntry, host_duty_milli) == 76);
static_assert(offsetof(SliceEntry, duty_wall_ns) == 80);
static_assert(offsetof(SliceEntry, host_wall_ns) == 96);
static_assert(offsetof(SliceEntry, host_gpu_ns) == 104);
static_assert(offsetof(SliceEntry, host_measured_ns) == 112);
static_assert(offsetof(SliceEntry, woke_ns) == 120);
static_assert(sizeof(SliceEntry) == kSliceEntrySize);

// One process of a slice using the GPU.
struct alignas(64) MemberEntry {
  std::atomic<uint64_t> owner;  // (pid << 32) | 1; 0: free.
  std::atomic<int32_t> slice;   // Index of its SliceEntry.
  std::atomic<uint32_t> flags;  // kMemberWaiting | kMemberInflight.
  std::atomic<uint64_t> heartbeat_ns;
  std::atomic<uint64_t> launches;  // Statistics.
  uint8_t reserved[kMemberEntrySize - 32];
};
static_assert(offsetof(MemberEntry, slice) == 8);
static_assert(offsetof(MemberEntry, heartbeat_ns) == 16);
static_assert(sizeof(MemberEntry) == kMemberEntrySize);

inline constexpr uint64_t kSlicesOffset = kCoordHeaderSize;
inline constexpr uint64_t kMembersOffset = kSlicesOffset + uint64_t{kSliceEntrySize} * kMaxSlices;
inline constexpr uint64_t kCoordSize = kMembersOffset + uint64_t{kMemberEntrySize} * kMaxMembers;
static_assert(kCoordSize == 512 + 4096 + 8192);

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

}  // namespace gpuslice::slice::coord
