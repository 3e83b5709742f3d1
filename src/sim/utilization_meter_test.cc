#include "sim/utilization_meter.h"

#include <gtest/gtest.h>

#include <memory>

#include "sim/device_faults.h"
#include "sim/sim_clock.h"

namespace gpuslice::sim {
namespace {

// One GPU in MIG mode as two units: 98 and 42 SMs. Power 100..400 W.
std::unique_ptr<layout::SharedState> TwoUnits() {
  auto state = std::make_unique<layout::SharedState>();
  state->header.device_count = 1;
  state->header.unit_count = 2;
  state->units[0].device = 0;
  state->units[0].sm_count = 98;
  state->units[1].device = 0;
  state->units[1].sm_count = 42;
  state->devices[0].idle_power_mw = 100000;
  state->devices[0].power_limit_mw = 400000;
  return state;
}

TEST(UtilizationMeter, BusyPercentIsTheShareOfTheWindowAtMostAll) {
  EXPECT_EQ(BusyPercent(500'000'000, 1'000'000), 50u);
  EXPECT_EQ(BusyPercent(3'000'000'000, 1'000'000), 100u);
  EXPECT_EQ(BusyPercent(5, 0), 0u) << "no window";
}

TEST(UtilizationMeter, ReadSamplesSkipsEmptyOnesAndSortsByTime) {
  layout::Sample ring[4] = {};
  ring[0].timestamp_us = 300;
  ring[0].busy_ns = 3;
  ring[2].timestamp_us = 100;
  ring[2].busy_ns = 1;
  std::vector<UtilSample> s = ReadSamples(ring, 4);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].timestamp_us, 100u);
  EXPECT_EQ(s[0].busy_ns, 1u);
  EXPECT_EQ(s[1].timestamp_us, 300u);
}

TEST(UtilizationMeter, OneSampleIsTakenPerIntervalWhoeverAsks) {
  auto state = TwoUnits();
  UtilizationMeter meter(state.get());
  meter.MaybeSample();
  meter.MaybeSample();
  EXPECT_EQ(state->unit_state[0].samples_taken.load(), 1u);
  EXPECT_EQ(state->unit_state[1].samples_taken.load(), 1u);
  EXPECT_EQ(meter.UnitSamples(0, 0).size(), 1u);
  EXPECT_TRUE(meter.UnitSamples(0, UnixMicros()).empty()) << "none newer than now";
}

TEST(UtilizationMeter, AnIdleGpuReadsZeroAndItsModelledSensors) {
  auto state = TwoUnits();
  UtilizationMeter meter(state.get());
  EXPECT_EQ(meter.UnitUtilizationPercent(0), 0u);
  EXPECT_EQ(meter.DeviceUtilizationPercent(0), 0u);
  EXPECT_EQ(meter.TemperatureC(0), 31u);
  EXPECT_EQ(meter.PowerMilliwatts(0), 100000u);
  DeviceFaults(state.get()).SetTemperature(0, 90);
  EXPECT_EQ(meter.TemperatureC(0), 90u) << "a set temperature wins";
}

TEST(UtilizationMeter, DeviceUtilizationIsWeightedBySms) {
  auto state = TwoUnits();
  UtilizationMeter meter(state.get());
  // A baseline sample a quarter second ago, then unit 0 busy throughout.
  const uint64_t then = UnixMicros() - 250'000;
  for (uint32_t u = 0; u < 2; ++u) {
    state->unit_state[u].samples[0].timestamp_us = then;
    state->unit_state[u].samples_taken = 1;
    state->unit_state[u].next_sample_us = UnixMicros() + 10'000'000;  // None due.
  }
  state->unit_state[0].busy_ns = 1'000'000'000;
  state->unit_state[0].last_busy_us = UnixMicros();
  EXPECT_EQ(meter.UnitUtilizationPercent(0), 100u);
  EXPECT_EQ(meter.UnitUtilizationPercent(1), 0u);
  EXPECT_EQ(meter.DeviceUtilizationPercent(0), 70u);  // 98 of 140 SMs.
  EXPECT_EQ(meter.PowerMilliwatts(0), 310000u);
}

}  // namespace
}  // namespace gpuslice::sim
