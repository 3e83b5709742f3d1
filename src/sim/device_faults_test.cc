#include "sim/device_faults.h"

#include <gtest/gtest.h>

#include <memory>

namespace gpuslice::sim {
namespace {

TEST(DeviceFaults, XidEventsArePublishedInOrderInTheRing) {
  auto state = std::make_unique<layout::SharedState>();
  DeviceFaults faults(state.get());
  faults.InjectXid(1, 79);
  faults.InjectXid(1, 48);
  const layout::DeviceHealth& h = faults.Health(1);
  EXPECT_EQ(h.xid_count.load(), 2u);
  EXPECT_EQ(h.xid_codes[0].load(), 79u);
  EXPECT_EQ(h.xid_codes[1].load(), 48u);
  EXPECT_EQ(faults.Health(0).xid_count.load(), 0u) << "another GPU";
}

TEST(DeviceFaults, XidCodesWrapAroundTheRing) {
  auto state = std::make_unique<layout::SharedState>();
  DeviceFaults faults(state.get());
  for (uint32_t i = 0; i <= layout::kXidRing; ++i) faults.InjectXid(0, 100 + i);
  EXPECT_EQ(faults.Health(0).xid_count.load(), layout::kXidRing + 1);
  EXPECT_EQ(faults.Health(0).xid_codes[0].load(), 100 + layout::kXidRing)
      << "the oldest overwritten";
}

TEST(DeviceFaults, EccErrorsAddUp) {
  auto state = std::make_unique<layout::SharedState>();
  DeviceFaults faults(state.get());
  faults.AddEccErrors(0, 5, 1);
  faults.AddEccErrors(0, 2, 0);
  EXPECT_EQ(faults.Health(0).ecc_corrected.load(), 7u);
  EXPECT_EQ(faults.Health(0).ecc_uncorrected.load(), 1u);
}

TEST(DeviceFaults, ASetTemperatureHoldsUntilZeroOrBelowReturnsToTheModel) {
  auto state = std::make_unique<layout::SharedState>();
  DeviceFaults faults(state.get());
  faults.SetTemperature(0, 95);
  EXPECT_EQ(faults.Health(0).temperature_c.load(), 95);
  faults.SetTemperature(0, -5);
  EXPECT_EQ(faults.Health(0).temperature_c.load(), 0);
}

}  // namespace
}  // namespace gpuslice::sim
