// Stream-ordered allocation and memory pools, and CUDA arrays.

#include <sys/mman.h>
#include <unistd.h>

#include "sim/driver/driver.h"

using namespace gpuslice::sim::driver;  // NOLINT: entry points are extern "C".

namespace {

constexpr size_t kPoolGranularity = 2u << 20;

MemPool* DefaultPoolLocked(Device* d) {
  if (d->default_pool == nullptr) {
    d->default_pool = new MemPool();
    d->default_pool->device = d;
    d->default_pool->is_default = true;
    Driver::Get().pools.insert(d->default_pool);
  }
  if (d->current_pool == nullptr) d->current_pool = d->default_pool;
  return d->default_pool;
}

// Gives cached blocks back to the device until at most `keep` bytes stay
// reserved.
void TrimLocked(MemPool* pool, uint64_t keep) {
  Driver& drv = Driver::Get();
  for (auto it = pool->cache.begin(); it != pool->cache.end() && pool->reserved > keep;) {
    auto a = drv.allocations.find(it->second);
    if (a != drv.allocations.end()) {
      pool->reserved -= a->second.charged;
      FreeLocked(a);
    }
    it = pool->cache.erase(it);
  }
}

CUresult AllocFromPool(CUdeviceptr* dptr, size_t bytes, MemPool* pool, CUstream stream) {
  Context* ctx = nullptr;
  if (CUresult r = CurrentActiveContext(&ctx); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Stream* s = nullptr;
  if (CUresult r = ResolveStreamLocked(stream, &s); r != CUDA_SUCCESS) return r;
  if (pool == nullptr) pool = DefaultPoolLocked(s->ctx->device)->device->current_pool;
  if (drv.pools.count(pool) == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t charged = (bytes + kPoolGranularity - 1) / kPoolGranularity * kPoolGranularity;
  // Reuse a cached block of the same size class first.
  auto hit = pool->cache.find(charged);
  if (hit != pool->cache.end()) {
    Allocation& a = drv.allocations[hit->second];
    a.cached = false;
    a.size = bytes;
    *dptr = hit->second;
    pool->cache.erase(hit);
  } else {
    uintptr_t base = 0;
    CUresult r = AllocateLocked(s->ctx, bytes, AllocKind::kPool, pool, &base);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && !pool->cache.empty()) {
      TrimLocked(pool, 0);  // The driver releases cached memory before failing.
      r = AllocateLocked(s->ctx, bytes, AllocKind::kPool, pool, &base);
    }
    if (r != CUDA_SUCCESS) return r;
    pool->reserved += drv.allocations[base].charged;
    pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
    *dptr = base;
  }
  pool->used += charged;
  pool->used_high = std::max(pool->used_high, pool->used);
  return CUDA_SUCCESS;
}

}  // namespace

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes,
                                                    CUstream stream) {
  return AllocFromPool(dptr, bytes, nullptr, stream);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes,
                                                            CUmemoryPool pool, CUstream stream) {
  if (pool == nullptr) {
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    return CUDA_ERROR_INVALID_VALUE;
  }
  return AllocFromPool(dptr, bytes, reinterpret_cast<MemPool*>(pool), stream);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Stream* s = nullptr;
  if (CUresult r = ResolveStreamLocked(stream, &s); r != CUDA_SUCCESS) return r;
  auto it = drv.allocations.find(dptr);
  if (it == drv.allocations.end() || it->second.cached) return CUDA_ERROR_INVALID_VALUE;
  // Stream-ordered: work queued before the free may still use the block,
  // so it is given back (to its pool, or to the device) when the stream
  // reaches the free. Until then it is neither usable nor reusable.
  it->second.cached = true;
  Work w;
  w.action = [dptr] {
    Driver& d = Driver::Get();
    std::lock_guard<DriverMutex> l(d.mu);
    auto a = d.allocations.find(dptr);
    if (a == d.allocations.end()) return;  // Its context went away meanwhile.
    MemPool* pool = a->second.pool;
    if (pool == nullptr || d.pools.count(pool) == 0) {
      FreeLocked(a);
      return;
    }
    // Back to the pool (still reserved); beyond the release threshold,
    // back to the device.
    pool->used -= a->second.charged;
    pool->cache.emplace(a->second.charged, dptr);
    TrimLocked(pool, pool->release_threshold);
  };
  return SubmitLocked(s, std::move(w), nullptr);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool* out, CUdevice dev) {
  Device* d = nullptr;
  if (CUresult r = LookupDevice(dev, &d); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  *out = reinterpret_cast<CUmemoryPool>(DefaultPoolLocked(d));
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool* out, CUdevice dev) {
  Device* d = nullptr;
  if (CUresult r = LookupDevice(dev, &d); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  DefaultPoolLocked(d);
  *out = reinterpret_cast<CUmemoryPool>(d->current_pool);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  Device* d = nullptr;
  if (CUresult r = LookupDevice(dev, &d); r != CUDA_SUCCESS) return r;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  MemPool* p = reinterpret_cast<MemPool*>(pool);
  if (p == nullptr || Driver::Get().pools.count(p) == 0 || p->device != d) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  d->current_pool = p;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* out,
                                                    const CUmemPoolProps* props) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || props == nullptr || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Device* d = nullptr;
  if (LookupDevice(props->location.id, &d) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  auto* p = new MemPool();
  p->device = d;
  Driver::Get().pools.insert(p);
  *out = reinterpret_cast<CUmemoryPool>(p);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  MemPool* p = reinterpret_cast<MemPool*>(pool);
  if (p == nullptr || drv.pools.count(p) == 0 || p->is_default) return CUDA_ERROR_INVALID_VALUE;
  TrimLocked(p, 0);
  // Blocks still allocated from the pool are freed with it.
  for (auto it = drv.allocations.begin(); it != drv.allocations.end();) {
    auto next = std::next(it);
    if (it->second.pool == p) FreeLocked(it);
    it = next;
  }
  if (p->device->current_pool == p) p->device->current_pool = p->device->default_pool;
  drv.pools.erase(p);
  delete p;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  MemPool* p = reinterpret_cast<MemPool*>(pool);
  if (p == nullptr || Driver::Get().pools.count(p) == 0) return CUDA_ERROR_INVALID_VALUE;
  TrimLocked(p, keep);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool,
                                                          CUmemPool_attribute attr, void* value) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  MemPool* p = reinterpret_cast<MemPool*>(pool);
  if (p == nullptr || Driver::Get().pools.count(p) == 0 || value == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t v64 = *static_cast<uint64_t*>(value);
  int v = *static_cast<int*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      p->release_threshold = v64;
      TrimLocked(p, v64);
      break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      p->reuse_follow_event = v;
      break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      p->reuse_opportunistic = v;
      break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      p->reuse_internal = v;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      if (v64 != 0) return CUDA_ERROR_INVALID_VALUE;  // Only resettable to 0.
      p->reserved_high = p->reserved;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (v64 != 0) return CUDA_ERROR_INVALID_VALUE;
      p->used_high = p->used;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool,
                                                          CUmemPool_attribute attr, void* value) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  MemPool* p = reinterpret_cast<MemPool*>(pool);
  if (p == nullptr || Driver::Get().pools.count(p) == 0 || value == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t* v64 = static_cast<uint64_t*>(value);
  int* v = static_cast<int*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *v64 = p->release_threshold;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *v64 = p->reserved;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      *v64 = p->reserved_high;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *v64 = p->used;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *v64 = p->used_high;
      break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      *v = p->reuse_follow_event;
      break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      *v = p->reuse_opportunistic;
      break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *v = p->reuse_internal;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

namespace {

size_t FormatBytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 0;
  }
}

CUresult CreateArray(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR& desc) {
  Context* ctx = nullptr;
  if (CUresult r = CurrentActiveContext(&ctx); r != CUDA_SUCCESS) return r;
  size_t elem = FormatBytes(desc.Format);
  if (out == nullptr || elem == 0 || desc.Width == 0 ||
      (desc.NumChannels != 1 && desc.NumChannels != 2 && desc.NumChannels != 4)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t bytes = desc.Width * std::max<size_t>(1, desc.Height) * std::max<size_t>(1, desc.Depth) *
                 elem * desc.NumChannels;
  bytes = (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  if (CUresult r = ToCuResult(drv.model()->ReserveMemory(ctx->device->unit, bytes));
      r != CUDA_SUCCESS) {
    return r;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    drv.model()->ReleaseMemory(ctx->device->unit, bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto* a = new Array();
  a->ctx = ctx;
  a->desc = desc;
  a->base = reinterpret_cast<uintptr_t>(p);
  a->bytes = bytes;
  drv.arrays.insert(a);
  *out = reinterpret_cast<CUarray>(a);
  return CUDA_SUCCESS;
}

}  // namespace

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuArrayCreate_v2(CUarray* out,
                                                     const CUDA_ARRAY_DESCRIPTOR* desc) {
  if (desc == nullptr) {
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = desc->Width;
  d3.Height = desc->Height;
  d3.Format = desc->Format;
  d3.NumChannels = desc->NumChannels;
  return CreateArray(out, d3);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuArray3DCreate_v2(CUarray* out,
                                                       const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (desc == nullptr) {
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CreateArray(out, *desc);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuArrayDestroy(CUarray handle) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Array* a = reinterpret_cast<Array*>(handle);
  if (a == nullptr || drv.arrays.count(a) == 0) return CUDA_ERROR_INVALID_HANDLE;
  munmap(reinterpret_cast<void*>(a->base), a->bytes);
  drv.model()->ReleaseMemory(a->ctx->device->unit, a->bytes);
  drv.arrays.erase(a);
  delete a;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* out,
                                                              CUarray handle) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Array* a = reinterpret_cast<Array*>(handle);
  if (a == nullptr || Driver::Get().arrays.count(a) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = a->desc;
  return CUDA_SUCCESS;
}

// Entry points with the same signature and behaviour: legacy names whose
// _v2 changed nothing visible here, and the per-thread-default-stream
// variants (the simulator gives every thread the legacy default stream).
GPUSLICE_CU_ALIAS(cuMemAllocAsync_ptsz, cuMemAllocAsync)
GPUSLICE_CU_ALIAS(cuMemFreeAsync_ptsz, cuMemFreeAsync)
GPUSLICE_CU_ALIAS(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync)
