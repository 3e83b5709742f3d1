#pragma once

// Accounting for stream-ordered allocations (cuMemAllocAsync,
// cuMemAllocFromPoolAsync). A memory pool keeps memory after
// cuMemFreeAsync, up to its release threshold, and can grow by more than the
// allocation asked for; what the device really holds for a pool is its
// CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT. So each pool is charged
//   max(live allocations + allocations in flight, reserved memory)
// re-read after every allocation and free from the pool, after a trim, and
// before any admission is refused. See docs/SHIM.md for what this can miss.

#include <cstdint>

#include "shim/base/cuda_api.h"

namespace gpuslice::shim {

// Index of the tracked pool, adding it (charged to slice device `dev`);
// -1 when the table of pools is full (the caller then charges the
// allocation itself, without pool-retained memory).
int TrackPool(CUmemoryPool pool, int dev);
int FindPool(CUmemoryPool pool);

// Reserve/commit/rollback of one allocation of `bytes` from tracked pool `p`.
// BeginPoolAlloc has already been admitted by the caller.
void BeginPoolAlloc(int p, uint64_t bytes);
void EndPoolAlloc(int p, uint64_t bytes, bool succeeded);
void PoolFreed(int p, uint64_t bytes);

// Re-reads reserved memory and adjusts the charge of one pool / every pool.
void ResyncPool(int p);
void ResyncPools();
// The pool was destroyed: return its whole charge.
void DropPool(CUmemoryPool pool);
// Forked child: the parent's pools are not ours.
void ForgetPools();

}  // namespace gpuslice::shim
