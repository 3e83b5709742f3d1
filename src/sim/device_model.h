#pragma once

// The simulated GPUs of one machine: a C++ view of the shared-memory state
// file (sim/state_layout.h) that every process using the simulator maps.
//
// Who calls what:
//   - the simulated driver (libcuda.so.1) opens the model in cuInit, registers
//     its process, charges memory and contexts, records kernel busy time and
//     runs the time-slicing arbiter (sim/time_slicer.h);
//   - the simulated NVML (libnvidia-ml.so.1) opens the model and only reads:
//     topology, memory per device and per process, utilisation samples,
//     temperature and power. Read calls reap dead processes first, so NVML
//     never reports a SIGKILLed process.
//
// Units. A CUDA device is a "unit": a whole GPU, or one MIG instance of a GPU
// in MIG mode. Memory, busy time and the arbiter are per unit; per-GPU values
// are sums over the GPU's units.
//
// Thread safety: all methods may be called from any thread of any process.
// Counters are lock-free atomics; registration and reaping take the file's
// robust mutex.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "sim/device_faults.h"
#include "sim/sim_config.h"
#include "sim/state_layout.h"
#include "sim/utilization_meter.h"

namespace gpuslice::sim {

// How to open the model. ModelOptionsFromEnvironment() fills it from
// GPUSLICE_SIM_{STATE,STATE_MODE,GPUS,CONFIG,QUANTUM_US,CONTEXT_MEM}.
struct ModelOptions {
  std::string state_path;  // Default: /dev/shm/gpuslice-sim-<uid>.
  SimConfig config;
  // False when the environment named no configuration: the process then
  // accepts whatever machine an existing state file describes.
  bool explicit_config = false;
  uint64_t quantum_ns = 1000000;
  uint64_t context_bytes = 300ull << 20;
  mode_t mode = 0600;
};

// Errors name the variable and the bad token.
core::Result<ModelOptions> ModelOptionsFromEnvironment();

struct MigInfo {
  uint32_t index = 0;  // Position on its GPU.
  std::string profile;
  std::string uuid;  // "MIG-..."
  uint32_t gpu_instance_id = 0;
  uint32_t compute_instance_id = 0;
  uint64_t memory_bytes = 0;
  uint32_t sm_count = 0;
  uint32_t unit = 0;
};

struct DeviceInfo {
  uint32_t index = 0;
  std::string name;
  std::string uuid;  // "GPU-..."
  uint64_t total_memory = 0;
  uint32_t sm_count = 0;
  uint32_t cc_major = 0, cc_minor = 0;
  uint32_t pci_domain = 0, pci_bus = 0, pci_device = 0;
  uint32_t clock_khz = 0, memory_clock_khz = 0, memory_bus_width = 0, l2_cache_bytes = 0;
  uint32_t power_limit_mw = 0;
  uint32_t unit = layout::kNoUnit;  // kNoUnit when MIG is enabled.
  bool mig_capable = false;         // Can run in MIG mode; true whenever `mig` is not empty.
  std::vector<MigInfo> mig;
  // "00000000:18:00.0" (NVML's form) and "0000:18:00.0" (CUDA's form).
  std::string PciBusIdNvml() const;
  std::string PciBusIdCuda() const;
};

struct UnitInfo {
  uint32_t index = 0;
  uint32_t device = 0;
  int32_t mig_index = -1;  // -1: the whole GPU.
  std::string uuid;
  uint64_t memory_bytes = 0;
  uint32_t sm_count = 0;
};

struct MemoryInfo {
  uint64_t total = 0;
  uint64_t used = 0;  // All processes, context overhead included.
  uint64_t free = 0;
};

struct ProcessUsage {
  pid_t pid = 0;
  uint64_t used_bytes = 0;     // Including context_bytes.
  uint64_t context_bytes = 0;  // Context overhead part.
  uint32_t contexts = 0;
  uint64_t busy_ns = 0;  // Kernel time this process received (ground truth).
  uint64_t launches = 0;
};

struct ProcessUtilization {
  pid_t pid = 0;
  uint64_t timestamp_us = 0;  // Of the newest sample used.
  uint32_t sm_percent = 0;    // Busy share of the unit over the window.
  uint64_t window_us = 0;
};

class DeviceModel {
 public:
  // Creates the state file (race-free: O_EXCL, then publishes the magic) or
  // attaches to an existing one, waiting briefly for its creator.
  static core::Result<std::unique_ptr<DeviceModel>> Open(const ModelOptions& options);
  ~DeviceModel();  // Unmaps; does not unregister (a process may reopen).
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  // Topology (immutable).
  uint32_t device_count() const;
  uint32_t unit_count() const;
  DeviceInfo Device(uint32_t device) const;
  UnitInfo Unit(uint32_t unit) const;
  uint64_t quantum_ns() const;
  uint64_t context_bytes() const;
  const std::string& path() const { return path_; }

  // This process. Register() claims a process slot (idempotent; reaps first
  // if the table is full). Unregister() gives back everything the process
  // holds, as process exit does.
  core::Status Register();
  void Unregister();
  int slot() const { return slot_; }  // -1 until registered.

  // Accounting for this process. Before Register() (or after Unregister())
  // the updates are ignored and reservations fail. ReserveMemory fails with
  // kResourceExhausted when the unit is full counting every process (dead
  // ones are reaped before giving up).
  core::Status ReserveMemory(uint32_t unit, uint64_t bytes);
  void ReleaseMemory(uint32_t unit, uint64_t bytes);
  // A context charges context_bytes() of device memory to the process.
  core::Status AddContext(uint32_t unit);
  void RemoveContext(uint32_t unit);
  void AddBusy(uint32_t unit, uint64_t ns);
  void CountLaunch(uint32_t unit);
  // This process left `unit` for another (a checkpoint restored elsewhere):
  // its busy time, launches and samples there are dropped, so NVML no
  // longer lists it on that unit. The unit's own totals keep its history.
  void ForgetUnit(uint32_t unit);

  // Reads, from any process. They reap dead processes and take a sample
  // when one is due (meter()).
  MemoryInfo UnitMemory(uint32_t unit);
  MemoryInfo DeviceMemory(uint32_t device);  // Sum over the GPU's units.
  // A process whose GPU state is checkpointed (docs/SIMULATOR.md,
  // "Checkpoint and restore") holds nothing and is not listed.
  std::vector<ProcessUsage> UnitProcesses(uint32_t unit);
  std::vector<ProcessUsage> DeviceProcesses(uint32_t device);  // Per pid, summed.
  uint64_t UnitBusyNs(uint32_t unit) const;
  uint64_t UnitLaunches(uint32_t unit) const;
  // Utilisation samples, utilisation per unit and device, and the sensors
  // derived from it (temperature, power).
  UtilizationMeter& meter() { return meter_; }
  // Per live process using the unit: its share over the window from its
  // newest sample at or before `since_us` (or its oldest) to its newest.
  // Processes with no sample newer than `since_us` are left out.
  std::vector<ProcessUtilization> ProcessUtilizationSince(uint32_t unit, uint64_t since_us);

  // Faults of the physical GPUs: XID events, ECC errors, a set temperature.
  DeviceFaults& faults() { return faults_; }

  // Frees the slots of dead processes (gone, zombie, or pid reused), giving
  // back their memory, contexts and arbiter. Returns how many.
  int Reap();
  // Whether the process in `slot` is alive (same pid and start time).
  bool SlotAlive(int slot) const;
  // The slot's pid as the reader names it (translated across PID namespaces).
  pid_t VisiblePidOf(const layout::ProcessSlot& s) const;

  // Raw shared state, for the arbiter and tests.
  layout::SharedState* state() { return state_; }

 private:
  friend class CheckpointChannel;  // Posts requests under the file's mutex.
  DeviceModel(std::string path, int fd, layout::SharedState* state);
  void Lock();
  void Unlock();
  void FreeSlotLocked(int slot);

  std::string path_;
  int fd_ = -1;
  layout::SharedState* state_ = nullptr;
  int slot_ = -1;
  pid_t registered_pid_ = 0;  // A forked child must not free its parent's slot.
  DeviceFaults faults_;
  UtilizationMeter meter_;
};

}  // namespace gpuslice::sim
