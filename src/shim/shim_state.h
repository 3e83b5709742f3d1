#pragma once

// The shim's per-process state: whether it enforces a slice, the mapped
// region, this process's slot, the map from visible device ordinals to slice
// devices, and the allocation tables.
//
// Initialisation is lazy (first CUDA or NVML call), runs once (a
// compare-and-swap on the phase; concurrent first callers yield until it is
// done) and is redone for the child after fork (pthread_atfork), which gets
// a slot of its own. The hot path reads the phase with one acquire load.

#include <atomic>
#include <cstdint>

#include "slice/region/admission.h"
#include "shim/base/alloc_table.h"
#include "shim/base/cuda_api.h"
#include "slice/region/region_layout.h"

namespace gpuslice::slice {
class Region;
}  // namespace gpuslice::slice

namespace gpuslice::shim {

enum Phase : int {
  kPhaseUninit = 0,
  kPhaseInitializing = 1,
  kPhasePassThrough = 2,  // No slice, disabled, or a fatal setup problem.
  kPhaseEnforcing = 3,
  kPhaseReattach = 4,     // Forked child: claim a slot of our own first.
  kPhaseShutdown = 5,     // Exiting: the slot has been returned.
};

extern std::atomic<int> g_phase;
extern bool g_disabled;  // GPUSLICE_DISABLE=1, read by the constructor.

inline bool Disabled() { return g_disabled; }

// Runs (or waits for) initialisation; returns the resulting phase.
int StartSlow();

// True when allocations must be counted. Acquire: pairs with the release
// that published the phase, so the region, slot and tables set up before it
// are visible.
inline bool Enforcing() {
  int phase = g_phase.load(std::memory_order_acquire);
  if (phase == kPhaseEnforcing) return true;
  if (phase == kPhasePassThrough || phase == kPhaseShutdown) return false;
  return StartSlow() == kPhaseEnforcing;
}

// Loads the driver for pass-through use (cheap after the first call).
bool DriverReady();

// What CurrentSliceDevice and SliceDeviceForOrdinal return besides an index.
inline constexpr int kNoContext = -1;  // Let the driver report its own error.
inline constexpr int kRefused = -2;    // Device outside the slice: no memory.

// The slice device of the calling thread's current context.
int CurrentSliceDevice();
// The slice device for a device ordinal as this process sees it.
int SliceDeviceForOrdinal(CUdevice ordinal);

slice::layout::DeviceEntry& SliceDevice(int index);
slice::layout::ProcessSlot& OwnSlot();
// Whether this process holds a slot of the slice (else OwnSlot() is a slot
// of no region and nothing may be charged), and which.
bool HaveSlot();
uint32_t OwnSlotIndex();

// Charges `bytes` on slice device `dev`; before refusing, sweeps dead
// processes and re-reads pool memory, then tries once more, and once more
// after waiting for the slice's first context on the device if one is being
// created (context_admission.h: it holds the room meanwhile).
bool Admit(int dev, uint64_t bytes);
inline void Unadmit(int dev, uint64_t bytes) {
  slice::Uncharge(SliceDevice(dev), OwnSlot(), uint32_t(dev), bytes);
}
inline void Force(int dev, uint64_t bytes) {
  slice::ForceCharge(SliceDevice(dev), OwnSlot(), uint32_t(dev), bytes);
}
// Limit and usage of a slice device, for the memory queries.
uint64_t SliceLimit(int dev);
uint64_t SliceUsed(int dev);
// The slice device whose UUID is `uuid`, or -1 (NVML queries).
int SliceDeviceForUuid(const char* uuid);

// The slice region (nullptr unless enforcing) and the configuration
// (nullptr before initialisation), for the compute gate.
slice::Region* SliceRegion();
const struct ShimConfig* Config();

// Allocation tables: device pointers, VMM handles, arrays.
AllocTable& Pointers();
AllocTable& VmmHandles();
AllocTable& Arrays();

}  // namespace gpuslice::shim
