#include "sim/device_faults.h"

namespace gpuslice::sim {

void DeviceFaults::InjectXid(uint32_t device, uint32_t code) {
  layout::DeviceHealth& h = Health(device);
  // One injector at a time claims the next sequence number; the code is
  // stored before the count that publishes it (release, paired with the
  // readers' acquire).
  uint64_t n = h.xid_count.load(std::memory_order_relaxed);
  h.xid_codes[n % layout::kXidRing].store(code, std::memory_order_relaxed);
  h.xid_count.store(n + 1, std::memory_order_release);
}

void DeviceFaults::AddEccErrors(uint32_t device, uint64_t corrected, uint64_t uncorrected) {
  layout::DeviceHealth& h = Health(device);
  h.ecc_corrected.fetch_add(corrected, std::memory_order_relaxed);
  h.ecc_uncorrected.fetch_add(uncorrected, std::memory_order_relaxed);
}

void DeviceFaults::SetTemperature(uint32_t device, int32_t celsius) {
  Health(device).temperature_c.store(celsius > 0 ? celsius : 0, std::memory_order_relaxed);
}

}  // namespace gpuslice::sim
