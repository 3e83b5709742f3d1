// Stream-ordered allocation: cuMemAllocAsync, cuMemAllocFromPoolAsync,
// cuMemFreeAsync (each also in its per-thread-default-stream flavour), and
// the pool calls that change how much memory a pool holds.

#include "shim/driver.h"
#include "shim/pool_tracker.h"
#include "shim/hooks/wrapper_util.h"

namespace gpuslice::shim {
namespace {

// Charges an allocation of `bytes` from `pool` (nullptr: the current pool
// of the current device) around `call`.
template <typename Call, typename Undo>
CUresult PoolAlloc(CUdeviceptr* dptr, uint64_t bytes, CUmemoryPool pool, Call call, Undo undo) {
  CUdevice ordinal = -1;
  if (Extras().cuCtxGetDevice == nullptr || Extras().cuCtxGetDevice(&ordinal) != CUDA_SUCCESS) {
    return call();  // No context: the driver reports it.
  }
  int dev = SliceDeviceForOrdinal(ordinal);
  if (dev == kNoContext) return call();
  if (dev == kRefused) return CUDA_ERROR_OUT_OF_MEMORY;
  if (pool == nullptr && Extras().cuDeviceGetMemPool != nullptr &&
      Extras().cuDeviceGetMemPool(&pool, ordinal) != CUDA_SUCCESS) {
    pool = nullptr;
  }
  int p = pool != nullptr ? TrackPool(pool, dev) : -1;
  if (!Admit(dev, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (p >= 0) BeginPoolAlloc(p, bytes);
  CUresult r = call();
  if (p >= 0) {
    EndPoolAlloc(p, bytes, r == CUDA_SUCCESS);
  } else if (r != CUDA_SUCCESS) {
    Unadmit(dev, bytes);
  }
  if (r != CUDA_SUCCESS) return r;
  AllocInfo info{bytes, uint32_t(dev), p >= 0 ? kKindPool : kKindPlain,
                 reinterpret_cast<uint64_t>(pool)};
  if (!Pointers().Insert(*dptr, info)) {
    undo();
    ReturnCharge(info);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return r;
}

}  // namespace
}  // namespace gpuslice::shim

using namespace gpuslice::shim;

#define GPUSLICE_ALLOC_ASYNC(symbol, free_symbol)                                           \
  GPUSLICE_EXPORT CUresult symbol(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {    \
    GPUSLICE_PROLOGUE(symbol);                                                              \
    if (!enforcing || dptr == nullptr) return real(dptr, bytesize, stream);                 \
    return PoolAlloc(                                                                       \
        dptr, bytesize, nullptr, [&] { return real(dptr, bytesize, stream); },              \
        [&] { REAL(free_symbol)(*dptr, stream); });                                         \
  }
GPUSLICE_ALLOC_ASYNC(cuMemAllocAsync, cuMemFreeAsync)
GPUSLICE_ALLOC_ASYNC(cuMemAllocAsync_ptsz, cuMemFreeAsync_ptsz)
#undef GPUSLICE_ALLOC_ASYNC

#define GPUSLICE_ALLOC_FROM_POOL(symbol, free_symbol)                                       \
  GPUSLICE_EXPORT CUresult symbol(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,    \
                                  CUstream stream) {                                        \
    GPUSLICE_PROLOGUE(symbol);                                                              \
    if (!enforcing || dptr == nullptr || pool == nullptr) {                                 \
      return real(dptr, bytesize, pool, stream);                                            \
    }                                                                                       \
    return PoolAlloc(                                                                       \
        dptr, bytesize, pool, [&] { return real(dptr, bytesize, pool, stream); },           \
        [&] { REAL(free_symbol)(*dptr, stream); });                                         \
  }
GPUSLICE_ALLOC_FROM_POOL(cuMemAllocFromPoolAsync, cuMemFreeAsync)
GPUSLICE_ALLOC_FROM_POOL(cuMemAllocFromPoolAsync_ptsz, cuMemFreeAsync_ptsz)
#undef GPUSLICE_ALLOC_FROM_POOL

#define GPUSLICE_FREE_ASYNC(symbol)                                                        \
  GPUSLICE_EXPORT CUresult symbol(CUdeviceptr dptr, CUstream stream) {                     \
    GPUSLICE_PROLOGUE(symbol);                                                             \
    if (!enforcing) return real(dptr, stream);                                             \
    return UnchargeAround(Pointers(), dptr, [&] { return real(dptr, stream); });           \
  }
GPUSLICE_FREE_ASYNC(cuMemFreeAsync)
GPUSLICE_FREE_ASYNC(cuMemFreeAsync_ptsz)
#undef GPUSLICE_FREE_ASYNC

GPUSLICE_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t min_bytes_to_keep) {
  GPUSLICE_PROLOGUE(cuMemPoolTrimTo);
  CUresult r = real(pool, min_bytes_to_keep);
  if (enforcing && r == CUDA_SUCCESS) {
    int p = FindPool(pool);
    if (p >= 0) ResyncPool(p);
  }
  return r;
}

GPUSLICE_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  GPUSLICE_PROLOGUE(cuMemPoolDestroy);
  CUresult r = real(pool);
  if (enforcing && r == CUDA_SUCCESS) DropPool(pool);
  return r;
}
