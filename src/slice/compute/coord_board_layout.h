#pragma once

// The two files of daemon-arbitrated compute shares (docs/COMPUTE.md,
// "Arbitration by the daemon"). Change anything here and bump the version of
// the file it belongs to.
//
// Trust split: a reader can tell from the name who may write it.
//  - The BOARD, one per GPU (`<coord dir>/gpu-<uuid>.board`, root 0644): the
//    arbiter's decisions. Written only by the daemon's arbiter thread; every
//    job maps it read-only. Launching threads read the turn (`holder`,
//    `turn_state`, `turn_seq` as the futex word) and their own slice entry.
//  - The MEMBERS file, one per slice (`<state>/slices/job-<id>/members`, the
//    job's uid, 0600): the slice's reports. Its processes publish there
//    whether they wait for a turn, have work in flight, a heartbeat, and
//    ring the `doorbell` (a futex word) when the arbiter should look now.
//    The arbiter reads it with pread(2) as untrusted input: every field is
//    bounds-checked, and nothing in it can name or change another slice.
//
// The board is
//   BoardHeader              (kBoardHeaderSize bytes)
//   BoardSlice[kBoardSlices] (kBoardSliceSize bytes each)
// The members file is
//   MembersHeader                  (kMembersHeaderSize bytes)
//   MemberSlot[kMembersPerSlice]   (kMemberSlotSize bytes each)

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpuslice::slice::board {

inline constexpr uint64_t kBoardMagic = 0x44524f4253555047ull;    // "GPUSBORD" little-endian.
inline constexpr uint64_t kMembersMagic = 0x424d454d53555047ull;  // "GPUSMEMB" little-endian.
inline constexpr uint32_t kBoardVersion = 1;
inline constexpr uint32_t kMembersVersion = 1;

inline constexpr uint32_t kBoardSlices = 64;
inline constexpr uint32_t kBoardHeaderSize = 512;
inline constexpr uint32_t kBoardSliceSize = 128;
inline constexpr uint32_t kMembersPerSlice = 64;
inline constexpr uint32_t kMembersHeaderSize = 256;
inline constexpr uint32_t kMemberSlotSize = 64;

// A member whose heartbeat is older than this is dead to the arbiter.
inline constexpr uint64_t kMemberTimeoutNs = 300'000'000;
// A board whose arbiter has not beaten for this long is not followed (the
// daemon is stopped or restarting): launches go ungated meanwhile.
inline constexpr uint64_t kArbiterStaleNs = 2'000'000'000;
// The arbiter beats at least this often.
inline constexpr uint64_t kArbiterBeatNs = 100'000'000;
// In a quiet turn the arbiter decides, and its slices' processes
// report, this often. Both sides rely on it: the arbiter's margin on a hard
// cap allows for reports one such tick late. Not part of the files' format.
inline constexpr uint64_t kQuietTickNs = 1'000'000;

// BoardHeader::turn_state (same values as coord::TurnState).
inline constexpr uint32_t kTurnNone = 0;
inline constexpr uint32_t kTurnOpen = 1;
inline constexpr uint32_t kTurnClosing = 2;

// BoardSlice::mode.
inline constexpr uint32_t kModeHard = 0;
inline constexpr uint32_t kModeWorkConserving = 1;

// BoardSlice::flags.
inline constexpr uint32_t kSlicePaused = 1u << 0;  // Idle reclaim: no turns.
// The slice may launch beside the holder while a turn is open or
// closing (PolicyParams::corun). Added within version 1: a shim that does
// not know the bit waits for turns of its own.
inline constexpr uint32_t kSliceCoRun = 1u << 1;
// The slice has no share of its own (the daemon registered it at
// the smallest share, work-conserving; SliceView::shareless): a slice with a
// share takes the GPU from it on demand. Added within version 1 (the
// arbiter's own record, kept on the board for a restarted daemon to
// recover; a shim reads it only to keep its queue shallow).
inline constexpr uint32_t kSliceNoShare = 1u << 2;

// MemberSlot::flags (only these bits are read).
inline constexpr uint32_t kMemberWaiting = 1u << 0;   // A launch waits for the turn.
inline constexpr uint32_t kMemberInflight = 1u << 1;  // Launched work not known complete.
// `gpu_ns` counts the GPU time of all its work (the slice is then
// charged that rather than wall time in flight).
inline constexpr uint32_t kMemberGpuTime = 1u << 2;
inline constexpr uint32_t kMemberFlagMask = kMemberWaiting | kMemberInflight | kMemberGpuTime;

struct BoardHeader {
  std::atomic<uint64_t> magic;  // kBoardMagic, published last.
  uint32_t version;             // kBoardVersion.
  uint32_t header_size;         // kBoardHeaderSize.
  uint64_t total_size;
  uint32_t slice_capacity;  // kBoardSlices.
  uint32_t slice_size;      // kBoardSliceSize.
  uint64_t created_unix_ns;
  char uuid[64];  // The GPU (or MIG instance) this board arbitrates.
  uint8_t reserved0[24];
  // Line 2 (offset 128): the arbiter.
  std::atomic<uint64_t> arbiter_pid;
  std::atomic<uint64_t> arbiter_beat_ns;  // CLOCK_MONOTONIC of its last tick or beat.
  std::atomic<uint64_t> ticks;            // Decisions taken (statistics).
  std::atomic<uint64_t> bells;            // Doorbell wake-ups (statistics).
  uint8_t reserved1[32];
  // Line 3 (offset 192): the turn. Read by launching threads.
  std::atomic<uint32_t> turn_seq;    // +1 on every change; the futex word.
  std::atomic<int32_t> holder;       // Slice index, -1: none.
  std::atomic<uint32_t> turn_state;  // kTurn*.
  uint32_t reserved2;
  std::atomic<uint64_t> turn_start_ns;
  std::atomic<uint64_t> turn_end_ns;
  std::atomic<uint64_t> turns;  // Turns granted (statistics).
  std::atomic<uint64_t> preemptions;
  uint8_t reserved3[kBoardHeaderSize - 240];
};
static_assert(offsetof(BoardHeader, version) == 8);
static_assert(offsetof(BoardHeader, total_size) == 16);
static_assert(offsetof(BoardHeader, created_unix_ns) == 32);
static_assert(offsetof(BoardHeader, uuid) == 40);
static_assert(offsetof(BoardHeader, arbiter_pid) == 128);
static_assert(offsetof(BoardHeader, arbiter_beat_ns) == 136);
static_assert(offsetof(BoardHeader, turn_seq) == 192);
static_assert(offsetof(BoardHeader, holder) == 196);
static_assert(offsetof(BoardHeader, turn_start_ns) == 208);
static_assert(offsetof(BoardHeader, preemptions) == 232);
static_assert(sizeof(BoardHeader) == kBoardHeaderSize);

// One slice on the GPU, as the arbiter decided it. The configuration comes
// from the daemon (the job's allocation), never from the job.
struct alignas(64) BoardSlice {
  std::atomic<uint64_t> job_id;  // 0: free entry.
  std::atomic<uint32_t> share_milli;
  std::atomic<uint32_t> mode;      // kMode*.
  std::atomic<uint32_t> priority;  // core::Priority (0 low, 1 normal, 2 high).
  std::atomic<uint32_t> flags;     // kSlice*.
  std::atomic<uint32_t> uid;       // Owner of the slice's members file.
  std::atomic<uint32_t> gid;
  std::atomic<uint32_t> device_index;  // This GPU's index among the slice's devices.
  uint32_t reserved0;
  std::atomic<int64_t> tokens_ns;  // Hard cap budget; overuse makes it negative.
  std::atomic<uint64_t> vtime;     // Charged ns x 1000 / share.
  std::atomic<uint64_t> charged_ns;
  std::atomic<uint64_t> idle_since_ns;
  std::atomic<uint32_t> reported;  // kMemberWaiting | kMemberInflight as last read (statistics).
  uint32_t reserved1;
  uint8_t reserved2[kBoardSliceSize - 80];
};
static_assert(offsetof(BoardSlice, share_milli) == 8);
static_assert(offsetof(BoardSlice, uid) == 24);
static_assert(offsetof(BoardSlice, device_index) == 32);
static_assert(offsetof(BoardSlice, tokens_ns) == 40);
static_assert(offsetof(BoardSlice, idle_since_ns) == 64);
static_assert(offsetof(BoardSlice, reported) == 72);
static_assert(sizeof(BoardSlice) == kBoardSliceSize);

struct MembersHeader {
  std::atomic<uint64_t> magic;  // kMembersMagic.
  uint32_t version;             // kMembersVersion.
  uint32_t header_size;         // kMembersHeaderSize.
  uint64_t total_size;
  uint32_t member_capacity;  // kMembersPerSlice.
  uint32_t member_size;      // kMemberSlotSize.
  uint64_t job_id;           // Written by the daemon at creation.
  uint64_t created_unix_ns;
  uint8_t reserved0[128 - 48];
  // Line 2 (offset 128): the doorbell, alone on its line. A member adds 1
  // and wakes it (FUTEX_WAKE, shared) when the arbiter should look now: a
  // launch started waiting, or work stopped being in flight.
  std::atomic<uint32_t> doorbell;
  uint8_t reserved1[kMembersHeaderSize - 132];
};
static_assert(offsetof(MembersHeader, version) == 8);
static_assert(offsetof(MembersHeader, total_size) == 16);
static_assert(offsetof(MembersHeader, job_id) == 32);
static_assert(offsetof(MembersHeader, doorbell) == 128);
static_assert(sizeof(MembersHeader) == kMembersHeaderSize);

// One process of the slice. Written only by that process (atomics).
struct alignas(64) MemberSlot {
  std::atomic<uint64_t> owner;         // (pid << 32) | 1; 0: free.
  std::atomic<uint32_t> device_index;  // Which of the slice's devices it launches on.
  std::atomic<uint32_t> flags;         // kMemberWaiting | kMemberInflight.
  std::atomic<uint64_t> heartbeat_ns;  // CLOCK_MONOTONIC.
  std::atomic<uint64_t> launches;      // Batches granted (statistics).
  std::atomic<uint64_t> gpu_ns;        // GPU time its work used (kMemberGpuTime; else statistics).
  uint8_t reserved[kMemberSlotSize - 40];
};
static_assert(offsetof(MemberSlot, device_index) == 8);
static_assert(offsetof(MemberSlot, flags) == 12);
static_assert(offsetof(MemberSlot, heartbeat_ns) == 16);
static_assert(offsetof(MemberSlot, gpu_ns) == 32);
static_assert(sizeof(MemberSlot) == kMemberSlotSize);

inline constexpr uint64_t kBoardSlicesOffset = kBoardHeaderSize;
inline constexpr uint64_t kBoardSize =
    kBoardSlicesOffset + uint64_t{kBoardSliceSize} * kBoardSlices;
static_assert(kBoardSize == 512 + 8192);
inline constexpr uint64_t kMembersSlotsOffset = kMembersHeaderSize;
inline constexpr uint64_t kMembersSize =
    kMembersSlotsOffset + uint64_t{kMemberSlotSize} * kMembersPerSlice;
static_assert(kMembersSize == 256 + 4096);
inline constexpr uint64_t kDoorbellOffset = offsetof(MembersHeader, doorbell);

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

}  // namespace gpuslice::slice::board
