#pragma once

// Utilisation of the simulated GPUs as NVML reports it: a view of the
// per-unit and per-process sample rings in the shared state file. Whoever
// reads takes a sample of every unit and live process when one is due
// (every kSampleIntervalUs, one process wins each round); utilisation is
// the busy share over a window of those samples. The simulated sensors,
// temperature and power, are derived from it.
//
// Thread safety: any thread of any process; samples are written and read
// lock-free (a sample's timestamp is cleared while it is rewritten).

#include <cstdint>
#include <vector>

#include "sim/state_layout.h"

namespace gpuslice::sim {

// Interval at which samples are taken.
inline constexpr uint64_t kSampleIntervalUs = 166667;
// UnitUtilizationPercent never looks further back than this (real NVML's
// utilisation window is at most one second).
inline constexpr uint64_t kMaxUtilizationWindowUs = 1000000;

struct UtilSample {
  uint64_t timestamp_us = 0;  // Unix epoch.
  uint64_t busy_ns = 0;       // Cumulative.
};

// Consistent copies of a sample ring's samples, oldest first.
std::vector<UtilSample> ReadSamples(const layout::Sample* ring, uint32_t size);

class UtilizationMeter {
 public:
  // `state` is mapped for the view's lifetime.
  explicit UtilizationMeter(layout::SharedState* state) : state_(state) {}

  // Takes a utilisation sample of every unit and process if ~166 ms have
  // passed since the last one. Cheap when none is due.
  void MaybeSample();
  // Samples of the unit's cumulative busy time newer than `since_us`, oldest first.
  std::vector<UtilSample> UnitSamples(uint32_t unit, uint64_t since_us);
  // Busy share over the last 1/6 .. 1 s (windowed like NVML), 0..100: one
  // second after the last kernel ended it reads 0.
  uint32_t UnitUtilizationPercent(uint32_t unit);
  uint32_t DeviceUtilizationPercent(uint32_t device);  // SM-weighted over units.
  // Simulated sensors, derived from recent utilisation (a temperature set
  // with DeviceFaults::SetTemperature takes precedence).
  uint32_t TemperatureC(uint32_t device);
  uint32_t PowerMilliwatts(uint32_t device);

 private:
  layout::SharedState* state_;
};

// A busy time over a window, as a percentage (at most 100).
uint32_t BusyPercent(uint64_t busy_ns, uint64_t window_us);

}  // namespace gpuslice::sim
