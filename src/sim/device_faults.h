#pragma once

// Faults of the simulated physical GPUs (docs/SIMULATOR.md, "Faults"), for
// tests and demos of monitoring: a view of the devices' health records in
// the shared state file, written by injectors (gpuslice-sim-fault, tests)
// and seen by every process through NVML.
//
// Thread safety: any thread of any process; the counters are atomics.
// Injections are meant to come one at a time.

#include <cstdint>

#include "sim/state_layout.h"

namespace gpuslice::sim {

class DeviceFaults {
 public:
  // `state` is mapped for the view's lifetime.
  explicit DeviceFaults(layout::SharedState* state) : state_(state) {}

  // An XID event with `code` (79: fallen off the bus, 48: double-bit ECC...).
  void InjectXid(uint32_t device, uint32_t code);
  // Adds to the volatile ECC error counts.
  void AddEccErrors(uint32_t device, uint64_t corrected, uint64_t uncorrected);
  // Reports `celsius` as the GPU's temperature; 0 returns to the modelled one.
  void SetTemperature(uint32_t device, int32_t celsius);
  // The device's health record, as the simulated NVML reads it.
  layout::DeviceHealth& Health(uint32_t device) { return state_->header.health[device]; }

 private:
  layout::SharedState* state_;
};

}  // namespace gpuslice::sim
