#pragma once

// The admission arithmetic on a slice region: the hot path of every
// allocation. Header-only so the shim inlines it: a couple of atomics and a
// branch, no lock, no system call, no allocation.
//
// Ordering rules that keep `device.used_bytes >= sum(live slots' used_bytes)`
// (region_layout.h) at every instant, so reclaiming a dead slot can never
// drive the device counter below what live processes hold:
//   charge:   device first, then slot;
//   uncharge: slot first, then device.
// A process killed between the two steps leaves the device counter too high
// by one allocation (the slice refuses a little early), never too low.
//
// Memory order: the counters publish no other data; each is a pure counter.
// Overshoot is prevented by the compare-and-swap alone, because every
// read-modify-write of one atomic sees the latest value in its modification
// order whatever the memory order. So relaxed is enough everywhere here.

#include <atomic>
#include <cstdint>

#include "slice/region/region_layout.h"

namespace gpuslice::slice {

// Raises `peak` to at least `value`.
inline void RaisePeak(std::atomic<uint64_t>& peak, uint64_t value) {
  uint64_t seen = peak.load(std::memory_order_relaxed);
  while (seen < value &&
         !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// Charges `bytes` on slice device `d` to `slot` if the slice stays within
// `limit` (Region::LimitOf(d): the daemon's limits page, or the region's own
// field in a standalone slice; never read here from `device`, which the job
// may rewrite). Returns false (and changes nothing) otherwise. The caller
// loads the limit with relaxed order: any value of the limit is a valid
// limit; a resize that races with this admission applies to the next one.
inline bool TryCharge(layout::DeviceEntry& device, layout::ProcessSlot& slot, uint32_t d,
                      uint64_t bytes, uint64_t limit) {
  uint64_t used = device.used_bytes.load(std::memory_order_relaxed);
  do {
    if (bytes > limit || used > limit - bytes) return false;
  } while (!device.used_bytes.compare_exchange_weak(used, used + bytes,
                                                    std::memory_order_relaxed));
  slot.used_bytes[d].fetch_add(bytes, std::memory_order_relaxed);
  RaisePeak(device.peak_bytes, used + bytes);
  return true;
}

// Counts one allocation refused for the slice's limit, for monitoring. Only
// the refusal path calls it (after the retry that follows a sweep), so a
// successful allocation costs nothing more.
inline void CountRefusal(layout::DeviceEntry& device) {
  device.refused_allocs.fetch_add(1, std::memory_order_relaxed);
}

// Charges `bytes` whatever the limit: for memory the driver has already taken
// (a context, a module, a memory pool that grew by more than asked).
inline void ForceCharge(layout::DeviceEntry& device, layout::ProcessSlot& slot, uint32_t d,
                        uint64_t bytes) {
  const uint64_t after = device.used_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  slot.used_bytes[d].fetch_add(bytes, std::memory_order_relaxed);
  RaisePeak(device.peak_bytes, after);
}

// Subtracts `bytes` from `counter`, stopping at zero. Only a bug or a
// damaged region could make it go below; saturating keeps one bad number
// from turning into "16 EiB used".
inline void SaturatingSub(std::atomic<uint64_t>& counter, uint64_t bytes) {
  uint64_t seen = counter.load(std::memory_order_relaxed);
  while (!counter.compare_exchange_weak(seen, seen >= bytes ? seen - bytes : 0,
                                        std::memory_order_relaxed)) {
  }
}

// Returns `bytes` previously charged by TryCharge or ForceCharge.
inline void Uncharge(layout::DeviceEntry& device, layout::ProcessSlot& slot, uint32_t d,
                     uint64_t bytes) {
  SaturatingSub(slot.used_bytes[d], bytes);
  SaturatingSub(device.used_bytes, bytes);
}

}  // namespace gpuslice::slice
