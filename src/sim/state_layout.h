#pragma once

// The layout of the simulator's shared-memory state file (docs/SIMULATOR.md,
// "State file"). Every process that uses the simulated GPU maps the same
// file; the layout is fixed-size, versioned and checked by static_asserts so
// that two builds never silently disagree. Change anything here and bump
// kStateVersion.
//
// Fields added since version 1 went into formerly reserved zero bytes whose
// zero means "nothing": DeviceRecord::mig_capable, UnitState::last_busy_us,
// ProcessSlot::pid_ns, Header::health, and the checkpoint fields of
// ProcessSlot (ckpt_*) and ProcessUnit (remap_to), so the version stays 1.
//
// Concurrency: immutable parts (header fields other than `magic`, devices,
// units) are written once by the creator before `magic` is published with a
// release store. Counters are std::atomic (lock-free, address-free, so valid
// across processes). Slot claim/release and reaping take `lock`, a robust
// process-shared mutex.

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpuslice::sim::layout {

inline constexpr uint64_t kStateMagic = 0x4d49534c53555047ull;  // "GPUSLSIM" little-endian.
inline constexpr uint32_t kStateVersion = 1;

inline constexpr uint32_t kMaxDevices = 16;
inline constexpr uint32_t kMaxMigPerDevice = 7;
inline constexpr uint32_t kMaxUnits = 64;  // Schedulable units: whole GPUs and MIG instances.
inline constexpr uint32_t kMaxProcesses = 128;
inline constexpr uint32_t kDeviceSamples = 64;  // Ring per unit: ~10 s at 6 Hz.
inline constexpr uint32_t kProcessSamples = 8;  // Ring per process and unit.
inline constexpr uint32_t kNoUnit = 0xffffffffu;

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// One utilisation sample: cumulative busy time at a wall-clock instant.
// Written by one sampler at a time (the one that won `next_sample_us`):
// `timestamp_us` is zeroed first and published last (release), so a reader
// that sees the same nonzero timestamp before and after reading `busy_ns`
// has a consistent pair.
struct Sample {
  std::atomic<uint64_t> timestamp_us;  // Microseconds since the Unix epoch.
  std::atomic<uint64_t> busy_ns;
};
static_assert(sizeof(Sample) == 16);

struct MigRecord {
  char profile[16];  // "1g.10gb"
  uint32_t unit;     // Index into SharedState::units.
  uint32_t gpu_instance_id;
  uint32_t compute_instance_id;
  uint32_t reserved0;
  uint8_t reserved[32];
};
static_assert(sizeof(MigRecord) == 64);

// A physical GPU. Immutable after initialisation.
struct DeviceRecord {
  char name[96];
  char uuid[64];
  uint64_t total_memory;
  uint32_t sm_count;
  uint32_t cc_major;
  uint32_t cc_minor;
  uint32_t pci_domain;
  uint32_t pci_bus;
  uint32_t pci_device;
  uint32_t clock_khz;
  uint32_t memory_clock_khz;
  uint32_t memory_bus_width;
  uint32_t l2_cache_bytes;
  uint32_t power_limit_mw;
  uint32_t idle_power_mw;
  uint32_t unit;       // Whole-GPU unit, or kNoUnit when MIG is enabled.
  uint32_t mig_count;  // 0: MIG disabled.
  MigRecord mig[kMaxMigPerDevice];
  // 1: the model can run in MIG mode (whether or not it does). Was reserved
  // (zero) space: files of older builds read 0 here, so readers also treat
  // mig_count > 0 as capable.
  uint32_t mig_capable;
  uint8_t reserved[348];
};
static_assert(sizeof(DeviceRecord) == 1024);
static_assert(offsetof(DeviceRecord, total_memory) == 160);
static_assert(offsetof(DeviceRecord, mig) == 224);
static_assert(offsetof(DeviceRecord, mig_capable) == 672);

// A schedulable unit: what a CUDA device handle stands for. Immutable.
struct UnitRecord {
  char uuid[64];  // "GPU-..." for a whole GPU, "MIG-..." for an instance.
  uint64_t memory_bytes;
  uint32_t sm_count;
  uint32_t device;    // Physical GPU index.
  int32_t mig_index;  // -1: the whole GPU.
  uint32_t reserved0;
  uint8_t reserved[40];
};
static_assert(sizeof(UnitRecord) == 128);

// The time-slicing arbiter of one unit. `holder` is also the futex word that
// waiters sleep on.
struct Arbiter {
  std::atomic<uint32_t> holder;  // Slot index + 1 of the process running kernels; 0: free.
  std::atomic<uint32_t> handoffs;
  std::atomic<uint64_t> holder_since_ns;              // CLOCK_MONOTONIC at acquisition.
  std::atomic<uint64_t> holder_heartbeat_ns;          // Refreshed every slice by the holder.
  std::atomic<uint64_t> waiting[kMaxProcesses / 64];  // Bit per slot with kernels queued.
  uint8_t reserved[24];
};
static_assert(sizeof(Arbiter) == 64);

// Dynamic state of a unit.
struct UnitState {
  std::atomic<uint64_t> used_bytes;  // All processes, context overhead included.
  std::atomic<uint64_t> busy_ns;     // Cumulative kernel time, all processes.
  std::atomic<uint64_t> launches;
  std::atomic<uint64_t> next_sample_us;  // Earliest time of the next sample; CAS claims it.
  std::atomic<uint64_t> samples_taken;   // Ring position = samples_taken % kDeviceSamples.
  // Wall clock (µs since the epoch) of the latest busy time recorded: bounds
  // how much of it can fall into a utilisation window when samples are old.
  // Was reserved (zero) space, so files of older builds read 0 here.
  std::atomic<uint64_t> last_busy_us;
  uint8_t reserved0[16];
  Arbiter arbiter;
  Sample samples[kDeviceSamples];
  uint8_t reserved[64];
};
static_assert(sizeof(UnitState) == 1216);
static_assert(offsetof(UnitState, last_busy_us) == 40);
static_assert(offsetof(UnitState, arbiter) == 64);
static_assert(offsetof(UnitState, samples) == 128);

// A process's use of one unit.
struct ProcessUnit {
  std::atomic<uint64_t> used_bytes;     // Allocations + context overhead.
  std::atomic<uint64_t> context_bytes;  // The context-overhead part of used_bytes.
  std::atomic<uint64_t> busy_ns;
  std::atomic<uint64_t> launches;
  std::atomic<uint32_t> contexts;
  uint32_t reserved0;
  std::atomic<uint64_t> samples_taken;
  // Checkpoint restore with GPU remapping (docs/SIMULATOR.md, "Checkpoint
  // and restore"): the unit this unit's work moves to, plus 1; 0: stays.
  // Written by the requester before it publishes a restore request. Was
  // reserved (zero) space, so files of older builds read "no remap".
  std::atomic<uint32_t> remap_to;
  uint8_t reserved[12];
  Sample samples[kProcessSamples];
};
static_assert(sizeof(ProcessUnit) == 192);
static_assert(offsetof(ProcessUnit, remap_to) == 48);

enum SlotState : uint32_t { kSlotFree = 0, kSlotLive = 1 };

// CUDA's checkpoint states (CUprocessState), as a process's slot stores them.
enum CheckpointState : uint32_t {
  kCkptRunning = 0,
  kCkptLocked = 1,
  kCkptCheckpointed = 2,
  kCkptFailed = 3,
};
// Operations a requester posts in ProcessSlot::ckpt_request's low byte.
enum CheckpointOp : uint32_t {
  kCkptOpNone = 0,
  kCkptOpLock = 1,
  kCkptOpCheckpoint = 2,
  kCkptOpRestore = 3,
  kCkptOpUnlock = 4,
};
// ckpt_request = sequence number << 16 | flags | op. The target's service
// thread sets kCkptTaken when it takes the request (the requester can no
// longer withdraw it) and kCkptAnswered with the answer; the requester
// clears the word (op 0) once it has read the answer.
inline constexpr uint32_t kCkptOpMask = 0x3f;
inline constexpr uint32_t kCkptAnswered = 0x40;
inline constexpr uint32_t kCkptTaken = 0x80;

struct ProcessSlot {
  std::atomic<uint32_t> state;  // SlotState.
  int32_t pid;
  uint64_t start_time;               // /proc/<pid>/stat field 22: tells a reused pid apart.
  std::atomic<uint64_t> generation;  // Bumped on every claim.
  // The inode of the process's PID namespace: `pid` is its pid there (a
  // process in a container knows no other). 0 in files of older builds:
  // the reader's own namespace. Readers translate (slice/base/pid_namespace.h).
  uint64_t pid_ns;
  // Checkpoint and restore (docs/SIMULATOR.md, "Checkpoint and restore").
  // Formerly reserved zero bytes: zero is "running, no request, no service
  // thread", so files of older builds stay valid and the version unchanged.
  // Written by the process's own service thread only: its CheckpointState.
  std::atomic<uint32_t> ckpt_state;
  // Futex word. Requester -> service thread: sequence number << 16 | flags
  // | CheckpointOp (see kCkptTaken); op 0: the channel is free.
  std::atomic<uint32_t> ckpt_request;
  // Futex word. Service thread -> requester: CUresult << 16 | sequence
  // number of the request it answers.
  std::atomic<uint32_t> ckpt_response;
  uint32_t ckpt_timeout_ms;  // Lock's timeout (0: none), set with the request.
  // The service thread's tid in the process's own PID namespace; 0: the
  // process's driver serves no checkpoint requests (an older build).
  std::atomic<int32_t> ckpt_tid;
  // The requester of the pending request: its slot + 1 and the low 32 bits
  // of that slot's generation, so that a requester that died before it
  // cleared the channel can be told apart (the next one then clears it).
  uint32_t ckpt_owner;
  uint32_t ckpt_owner_generation;
  uint8_t reserved[4];
  ProcessUnit units[kMaxUnits];
};
static_assert(offsetof(ProcessSlot, pid_ns) == 24);
static_assert(offsetof(ProcessSlot, ckpt_state) == 32);
static_assert(offsetof(ProcessSlot, ckpt_request) == 36);
static_assert(offsetof(ProcessSlot, ckpt_response) == 40);
static_assert(offsetof(ProcessSlot, ckpt_timeout_ms) == 44);
static_assert(offsetof(ProcessSlot, ckpt_tid) == 48);
static_assert(offsetof(ProcessSlot, ckpt_owner) == 52);
static_assert(offsetof(ProcessSlot, ckpt_owner_generation) == 56);
static_assert(sizeof(ProcessSlot) == 64 + 192 * kMaxUnits);

// Faults injected into a physical GPU (gpuslice-sim-fault, DeviceModel's
// InjectXid / AddEccErrors / SetTemperature), read by the simulated NVML:
// volatile ECC counts, XID events, a fixed temperature. Lives in the
// header's formerly reserved (zero) bytes: zero means "no fault", so files
// of older builds read as healthy and the version is unchanged.
inline constexpr uint32_t kXidRing = 8;
struct DeviceHealth {
  std::atomic<uint64_t> ecc_corrected;    // Volatile single-bit ECC errors.
  std::atomic<uint64_t> ecc_uncorrected;  // Volatile double-bit ECC errors.
  // XID events so far; the code of event i is xid_codes[i % kXidRing],
  // written before xid_count is raised past i (release).
  std::atomic<uint64_t> xid_count;
  std::atomic<uint32_t> xid_codes[kXidRing];
  std::atomic<int32_t> temperature_c;  // > 0: reported as is; 0: follows utilisation.
  uint32_t reserved;
};
static_assert(sizeof(DeviceHealth) == 64);

struct Header {
  std::atomic<uint64_t> magic;  // kStateMagic, published last (release).
  uint32_t version;
  uint32_t header_size;
  uint64_t file_size;
  uint32_t device_count;
  uint32_t unit_count;
  uint32_t max_processes;
  uint32_t reserved0;
  uint64_t quantum_ns;     // Time slice of the arbiters.
  uint64_t context_bytes;  // Device memory each context takes.
  uint64_t created_unix_us;
  uint64_t config_fingerprint;  // SimConfig::Fingerprint() of the creator.
  uint8_t reserved1[184];
  pthread_mutex_t lock;  // Robust, process-shared.
  uint8_t reserved2[1024 - 256 - sizeof(pthread_mutex_t)];
  DeviceHealth health[kMaxDevices];  // Was reserved (zero): see DeviceHealth.
  uint8_t reserved3[4096 - 1024 - sizeof(DeviceHealth) * kMaxDevices];
};
static_assert(sizeof(Header) == 4096);
static_assert(offsetof(Header, health) == 1024);
static_assert(offsetof(Header, version) == 8);
static_assert(offsetof(Header, quantum_ns) == 40);
static_assert(offsetof(Header, config_fingerprint) == 64);
static_assert(offsetof(Header, lock) == 256);

struct SharedState {
  Header header;
  DeviceRecord devices[kMaxDevices];
  UnitRecord units[kMaxUnits];
  UnitState unit_state[kMaxUnits];
  ProcessSlot slots[kMaxProcesses];
};
static_assert(offsetof(SharedState, devices) == 4096);
static_assert(offsetof(SharedState, units) == 4096 + 1024 * kMaxDevices);
static_assert(offsetof(SharedState, unit_state) == 4096 + 1024 * kMaxDevices + 128 * kMaxUnits);
static_assert(offsetof(SharedState, slots) == 4096 + 1024 * kMaxDevices + (128 + 1216) * kMaxUnits);

}  // namespace gpuslice::sim::layout
