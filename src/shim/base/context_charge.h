#pragma once

// The arithmetic of charging a context (the driver's own memory, a few
// hundred MiB on a real GPU) to a slice before the driver creates it, so that
// NVML never sees the slice above its limit, not even for the moment between
// the creation and a check made after it.
//
// A context is reserved like an allocation, with the compare-and-swap of
// TryCharge on the device's used_bytes, at the slice's learnt context size
// for that device (DeviceEntry::context_bytes). The slice's first context on
// a device has no learnt size: its creator becomes the device's learner
// (DeviceEntry::context_learner) and reserves all the room left under the
// limit, so that whatever the context turns out to take, nothing else of the
// slice can be admitted beside it; it measures the context with NVML,
// publishes the size and settles its reservation to it. Other creators wait
// for the learner meanwhile (context_admission.cc).
//
// Every reservation is part of the slot's overhead_bytes (driver memory) from
// the moment it is made, so used_bytes includes each context before it
// exists; the daemon reads used_bytes as the slice's usage.
//
// Header-only and pure (no driver, no NVML, no clock): unit-tested in
// context_charge_test.cc. Memory order as in admission.h: relaxed counters,
// except the learner word, which publishes context_bytes.

#include <atomic>
#include <cstdint>

#include "slice/region/admission.h"
#include "slice/region/region_layout.h"

namespace gpuslice::shim {

// DeviceEntry::context_learner once context_bytes holds the learnt size.
inline constexpr uint64_t kContextLearnt = ~0ull;

// The learner word of the process with `pid` in region slot `slot`: both, so
// that a waiter can tell a live learner from a dead one by the slot's owner.
constexpr uint64_t LearnerWord(int32_t pid, uint32_t slot) {
  return (uint64_t{static_cast<uint32_t>(pid)} << 32) | (uint64_t{slot} + 1);
}
constexpr bool IsLearning(uint64_t word) { return word != 0 && word != kContextLearnt; }
constexpr int32_t LearnerPid(uint64_t word) { return static_cast<int32_t>(word >> 32); }
constexpr uint32_t LearnerSlot(uint64_t word) {
  return static_cast<uint32_t>(word & 0xffffffffu) - 1;
}

// The learnt size of one fresh context on `device`, or false if nobody has
// learnt it yet. A non-zero context_bytes counts as learnt whatever the
// learner word says (regions whose size an older shim cached).
inline bool LearntContextSize(const slice::layout::DeviceEntry& device, uint64_t* bytes) {
  // Acquire: pairs with the release in PublishContextSize, so a reader that
  // sees kContextLearnt reads the size stored before it.
  const uint64_t word = device.context_learner.load(std::memory_order_acquire);
  const uint64_t size = device.context_bytes.load(std::memory_order_relaxed);
  if (word != kContextLearnt && size == 0) return false;
  *bytes = size;
  return true;
}

// Claims the learning of `device`'s context size for `word` (LearnerWord).
// False when another process or thread holds it, or it is learnt.
inline bool ClaimLearning(slice::layout::DeviceEntry& device, uint64_t word) {
  uint64_t none = 0;
  return device.context_learner.compare_exchange_strong(none, word, std::memory_order_relaxed);
}

// The learner's result: `bytes` becomes the device's context size (unless
// one is cached already: the first to learn wins) and the claim ends.
inline void PublishContextSize(slice::layout::DeviceEntry& device, uint64_t word, uint64_t bytes) {
  uint64_t none = 0;
  device.context_bytes.compare_exchange_strong(none, bytes, std::memory_order_relaxed);
  // Release: the size above is visible to whoever sees kContextLearnt.
  device.context_learner.compare_exchange_strong(word, kContextLearnt, std::memory_order_release,
                                                 std::memory_order_relaxed);
}

// Ends a claim without a result (the creation failed, NVML could not tell, or
// the learner died): the next creator learns.
inline void AbandonLearning(slice::layout::DeviceEntry& device, uint64_t word) {
  device.context_learner.compare_exchange_strong(word, 0, std::memory_order_relaxed);
}

// Reserves `bytes` for a context about to be created, within `limit`.
// False (and nothing changed) when it does not fit.
inline bool TryReserveContext(slice::layout::DeviceEntry& device, slice::layout::ProcessSlot& slot,
                              uint32_t d, uint64_t bytes, uint64_t limit) {
  if (!slice::TryCharge(device, slot, d, bytes, limit)) return false;
  slot.overhead_bytes[d].fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

// Reserves everything left under `limit` (the learner's reservation) and
// returns how much that was; 0 when nothing is left. The peak is not raised:
// the hold is a lock on the room, not memory anyone uses.
inline uint64_t ReserveHeadroom(slice::layout::DeviceEntry& device,
                                slice::layout::ProcessSlot& slot, uint32_t d, uint64_t limit) {
  uint64_t used = device.used_bytes.load(std::memory_order_relaxed);
  uint64_t take = 0;
  do {
    take = used < limit ? limit - used : 0;
    if (take == 0) return 0;
  } while (!device.used_bytes.compare_exchange_weak(used, used + take, std::memory_order_relaxed));
  slot.used_bytes[d].fetch_add(take, std::memory_order_relaxed);
  slot.overhead_bytes[d].fetch_add(take, std::memory_order_relaxed);
  return take;
}

// Returns `bytes` of context charge (a reservation given back, a context
// destroyed): the slot first, then the device (admission.h's order).
inline void ReturnContext(slice::layout::DeviceEntry& device, slice::layout::ProcessSlot& slot,
                          uint32_t d, uint64_t bytes) {
  slice::SaturatingSub(slot.overhead_bytes[d], bytes);
  slice::Uncharge(device, slot, d, bytes);
}

// Adds `bytes` of driver memory the driver has already taken (a context
// larger than reserved, a module): forced, whatever the limit.
inline void ForceDriverMemory(slice::layout::DeviceEntry& device, slice::layout::ProcessSlot& slot,
                              uint32_t d, uint64_t bytes) {
  slice::ForceCharge(device, slot, d, bytes);
  slot.overhead_bytes[d].fetch_add(bytes, std::memory_order_relaxed);
}

// Turns a reservation of `reserved` into a charge of `actual` for a context
// that now exists: more is forced (the driver has taken it), less returned.
inline void SettleContext(slice::layout::DeviceEntry& device, slice::layout::ProcessSlot& slot,
                          uint32_t d, uint64_t reserved, uint64_t actual) {
  if (actual > reserved) ForceDriverMemory(device, slot, d, actual - reserved);
  if (actual < reserved) ReturnContext(device, slot, d, reserved - actual);
}

// What the slot's overhead_bytes should be, from NVML's per-process figure
// `nvml_used` on the device: what it shows beyond the allocations the shim
// charged (`charged` − `overhead`, never below what the driver holds for
// them: allocations are charged before the driver makes them), plus
// `unseen`: reservations of contexts NVML cannot show yet (being created)
// or now (a reset primary context the process still holds, which the driver
// re-creates on its next use).
constexpr uint64_t DriverMemoryTarget(uint64_t nvml_used, uint64_t charged, uint64_t overhead,
                                      uint64_t unseen) {
  const uint64_t allocations = charged > overhead ? charged - overhead : 0;
  return (nvml_used > allocations ? nvml_used - allocations : 0) + unseen;
}

// Moves the slot's overhead on `d` to `target` (ResyncDriverMemory).
inline void SetDriverMemory(slice::layout::DeviceEntry& device, slice::layout::ProcessSlot& slot,
                            uint32_t d, uint64_t target) {
  const uint64_t overhead = slot.overhead_bytes[d].load(std::memory_order_relaxed);
  if (target > overhead) ForceDriverMemory(device, slot, d, target - overhead);
  if (target < overhead) ReturnContext(device, slot, d, overhead - target);
}

// What one process holds for its contexts, so that a destroy or release
// returns exactly what its creation was charged, NVML or not: created
// contexts by handle, primary contexts by device ordinal, and the
// reservations of creations under way. Not thread-safe: the caller
// serialises every use (context_admission.cc's guard). Fixed-size, no
// allocation; wiped in a forked child (Clear).
class ContextLedger {
 public:
  static constexpr int kMaxCreated = 256;  // Live cuCtxCreate contexts per process.
  static constexpr int kMaxOrdinals = 64;  // As shim_state.cc's ordinal map.

  struct Primary {
    int32_t dev = -1;    // Slice device it is charged to; -1: no charge recorded.
    uint32_t refs = 0;   // Retains seen minus releases seen.
    uint64_t bytes = 0;  // The charge (0 for a context of 0 bytes), kept while
                         // retained, even across a reset.
  };

  // Records a created context; false when kMaxCreated are live already.
  bool AddCreated(uint64_t handle, int dev, uint64_t bytes) {
    for (Created& c : created_) {
      if (c.dev < 0) {
        c = Created{handle, dev, bytes};
        return true;
      }
    }
    return false;
  }
  bool HasRoomForCreated() const {
    for (const Created& c : created_) {
      if (c.dev < 0) return true;
    }
    return false;
  }
  // Takes the record of `handle` out; false if it has none.
  bool TakeCreated(uint64_t handle, int* dev, uint64_t* bytes) {
    for (Created& c : created_) {
      if (c.dev >= 0 && c.handle == handle) {
        *dev = c.dev;
        *bytes = c.bytes;
        c = Created{};
        return true;
      }
    }
    return false;
  }

  // The primary context of `ordinal` (0 <= ordinal < kMaxOrdinals).
  Primary& primary(int ordinal) { return primaries_[ordinal]; }
  const Primary& primary(int ordinal) const { return primaries_[ordinal]; }

  // Reservations of creations under way on slice device `dev`.
  void AddPending(int dev, uint64_t bytes) { pending_[dev] += bytes; }
  void SubPending(int dev, uint64_t bytes) {
    pending_[dev] = pending_[dev] >= bytes ? pending_[dev] - bytes : 0;
  }
  uint64_t pending(int dev) const { return pending_[dev]; }

  // Whether this process has a context charged on `dev` (created or primary).
  bool HoldsContextOn(int dev) const {
    for (const Created& c : created_) {
      if (c.dev == dev) return true;
    }
    for (const Primary& p : primaries_) {
      if (p.dev == dev) return true;
    }
    return false;
  }

  void Clear() { *this = ContextLedger(); }

 private:
  struct Created {
    uint64_t handle = 0;
    int32_t dev = -1;  // -1: free.
    uint64_t bytes = 0;
  };
  Created created_[kMaxCreated];
  Primary primaries_[kMaxOrdinals];
  uint64_t pending_[slice::layout::kMaxDevices] = {};
};

}  // namespace gpuslice::shim
