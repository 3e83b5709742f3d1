#include "shim/pool_tracker.h"

#include <atomic>

#include "shim/driver.h"
#include "shim/shim_state.h"

namespace gpuslice::shim {
namespace {

constexpr int kMaxPools = 64;

// One tracked pool. `pool` is claimed with a compare-and-swap and never
// reused for another pool while tracked. `charged` always equals what this
// pool contributes to the region: every change to it is mirrored there.
// All counters are relaxed: they publish no other data (admission.h).
struct PoolEntry {
  std::atomic<uint64_t> pool;  // CUmemoryPool, 0: free.
  std::atomic<int> device;
  std::atomic<uint64_t> live;      // Bytes allocated and not freed.
  std::atomic<uint64_t> pending;   // Bytes admitted, driver call in flight.
  std::atomic<uint64_t> charged;   // Bytes charged to the slice for this pool.
};
PoolEntry g_pools[kMaxPools];

uint64_t Reserved(CUmemoryPool pool) {
  cuuint64_t value = 0;
  const DriverExtras& x = Extras();
  if (x.cuMemPoolGetAttribute == nullptr ||
      x.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &value) !=
          CUDA_SUCCESS) {
    return 0;  // Unknown: charge live allocations only.
  }
  return value;
}

// Moves the pool's charge to `target`, mirroring the change in the region.
void SetCharge(PoolEntry& e, uint64_t target) {
  int dev = e.device.load(std::memory_order_relaxed);
  uint64_t charged = e.charged.load(std::memory_order_relaxed);
  while (charged != target) {
    if (e.charged.compare_exchange_weak(charged, target, std::memory_order_relaxed)) {
      if (target > charged) {
        Force(dev, target - charged);
      } else {
        Unadmit(dev, charged - target);
      }
      return;
    }
  }
}

}  // namespace

int FindPool(CUmemoryPool pool) {
  uint64_t key = reinterpret_cast<uint64_t>(pool);
  for (int i = 0; i < kMaxPools; ++i) {
    if (g_pools[i].pool.load(std::memory_order_acquire) == key) return i;
  }
  return -1;
}

int TrackPool(CUmemoryPool pool, int dev) {
  int found = FindPool(pool);
  if (found >= 0) return found;
  uint64_t key = reinterpret_cast<uint64_t>(pool);
  for (int i = 0; i < kMaxPools; ++i) {
    PoolEntry& e = g_pools[i];
    uint64_t expected = 0;
    if (e.pool.load(std::memory_order_relaxed) != 0) continue;
    e.device.store(dev, std::memory_order_relaxed);
    // Release: the device index is visible to whoever finds the pool.
    if (e.pool.compare_exchange_strong(expected, key, std::memory_order_release)) return i;
  }
  return FindPool(pool);  // Another thread may have added it meanwhile.
}

void BeginPoolAlloc(int p, uint64_t bytes) {
  g_pools[p].pending.fetch_add(bytes, std::memory_order_relaxed);
  g_pools[p].charged.fetch_add(bytes, std::memory_order_relaxed);
}

void EndPoolAlloc(int p, uint64_t bytes, bool succeeded) {
  PoolEntry& e = g_pools[p];
  if (succeeded) e.live.fetch_add(bytes, std::memory_order_relaxed);
  e.pending.fetch_sub(bytes, std::memory_order_relaxed);
  if (!succeeded) {
    e.charged.fetch_sub(bytes, std::memory_order_relaxed);
    Unadmit(e.device.load(std::memory_order_relaxed), bytes);
    return;
  }
  ResyncPool(p);
}

void PoolFreed(int p, uint64_t bytes) {
  g_pools[p].live.fetch_sub(bytes, std::memory_order_relaxed);
  ResyncPool(p);
}

void ResyncPool(int p) {
  PoolEntry& e = g_pools[p];
  uint64_t key = e.pool.load(std::memory_order_acquire);
  if (key == 0) return;
  uint64_t reserved = Reserved(reinterpret_cast<CUmemoryPool>(key));
  uint64_t in_use = e.live.load(std::memory_order_relaxed) +
                    e.pending.load(std::memory_order_relaxed);
  SetCharge(e, in_use > reserved ? in_use : reserved);
}

void ResyncPools() {
  for (int i = 0; i < kMaxPools; ++i) {
    if (g_pools[i].pool.load(std::memory_order_relaxed) != 0) ResyncPool(i);
  }
}

void DropPool(CUmemoryPool pool) {
  int p = FindPool(pool);
  if (p < 0) return;
  PoolEntry& e = g_pools[p];
  SetCharge(e, 0);
  e.live.store(0, std::memory_order_relaxed);
  e.pending.store(0, std::memory_order_relaxed);
  e.pool.store(0, std::memory_order_release);
}

void ForgetPools() {
  for (PoolEntry& e : g_pools) {
    e.pool.store(0, std::memory_order_relaxed);
    e.live.store(0, std::memory_order_relaxed);
    e.pending.store(0, std::memory_order_relaxed);
    e.charged.store(0, std::memory_order_relaxed);
  }
}

}  // namespace gpuslice::shim
