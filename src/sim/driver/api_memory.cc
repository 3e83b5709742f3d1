// Device memory: allocation, information, copies and memsets.

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "sim/driver/driver.h"

using namespace gpuslice::sim::driver;  // NOLINT: entry points are extern "C".

namespace {

CUresult Alloc(CUdeviceptr* dptr, size_t bytes, AllocKind kind) {
  Context* ctx = nullptr;
  if (CUresult r = CurrentActiveContext(&ctx); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  uintptr_t base = 0;
  if (CUresult r = AllocateLocked(ctx, bytes, kind, nullptr, &base); r != CUDA_SUCCESS) return r;
  *dptr = base;
  return CUDA_SUCCESS;
}

// Checks that [ptr, ptr + bytes) is device memory of this process.
CUresult CheckDevice(CUdeviceptr ptr, size_t bytes) {
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  auto it = FindRangeLocked(ptr, bytes);
  if (it == Driver::Get().allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult Copy(void* dst, const void* src, size_t bytes, bool dst_dev, bool src_dev, CUstream stream,
              bool async) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (dst == nullptr || src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) return CUDA_SUCCESS;
  if (dst_dev) {
    if (CUresult r = CheckDevice(reinterpret_cast<CUdeviceptr>(dst), bytes); r != CUDA_SUCCESS)
      return r;
  }
  if (src_dev) {
    if (CUresult r = CheckDevice(reinterpret_cast<CUdeviceptr>(src), bytes); r != CUDA_SUCCESS)
      return r;
  }
  auto action = [dst, src, bytes] { std::memmove(dst, src, bytes); };
  if (!async) return RunSync(action);
  Context* ctx = nullptr;
  if (CUresult r = CurrentActiveContext(&ctx); r != CUDA_SUCCESS) return r;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Stream* s = nullptr;
  if (CUresult r = ResolveStreamLocked(stream, &s); r != CUDA_SUCCESS) return r;
  Work w;
  w.action = action;
  return SubmitLocked(s, std::move(w), nullptr);
}

template <typename T>
CUresult Memset(CUdeviceptr dst, T value, size_t count, CUstream stream, bool async) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (dst % sizeof(T) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (count == 0) return CUDA_SUCCESS;
  if (CUresult r = CheckDevice(dst, count * sizeof(T)); r != CUDA_SUCCESS) return r;
  auto action = [dst, value, count] {
    T* p = reinterpret_cast<T*>(dst);
    if constexpr (sizeof(T) == 1) {
      std::memset(p, value, count);
    } else {
      for (size_t i = 0; i < count; ++i) p[i] = value;
    }
  };
  if (!async) return RunSync(action);
  Context* ctx = nullptr;
  if (CUresult r = CurrentActiveContext(&ctx); r != CUDA_SUCCESS) return r;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Stream* s = nullptr;
  if (CUresult r = ResolveStreamLocked(stream, &s); r != CUDA_SUCCESS) return r;
  Work w;
  w.action = action;
  return SubmitLocked(s, std::move(w), nullptr);
}

void* P(CUdeviceptr p) { return reinterpret_cast<void*>(p); }

}  // namespace

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return Alloc(dptr, bytesize, AllocKind::kDevice);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize,
                                                      unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  return Alloc(dptr, bytesize, AllocKind::kManaged);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch,
                                                       size_t width, size_t height,
                                                       unsigned int element_size) {
  if (pitch == nullptr || width == 0 || height == 0 ||
      (element_size != 4 && element_size != 8 && element_size != 16)) {
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t p = (width + 511) / 512 * 512;  // Rows aligned for coalesced access.
  CUresult r = Alloc(dptr, p * height, AllocKind::kDevice);
  if (r == CUDA_SUCCESS) *pitch = p;
  return r;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (dptr == 0) return CUDA_SUCCESS;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  auto it = drv.allocations.find(dptr);
  if (it == drv.allocations.end() || it->second.cached ||
      (it->second.kind != AllocKind::kDevice && it->second.kind != AllocKind::kManaged &&
       it->second.kind != AllocKind::kPool)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (it->second.pool != nullptr) {
    it->second.pool->used -= it->second.charged;
    it->second.pool->reserved -= it->second.charged;
  }
  FreeLocked(it);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  Context* ctx = nullptr;
  if (CUresult r = CurrentActiveContext(&ctx); r != CUDA_SUCCESS) return r;
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  gpuslice::sim::MemoryInfo m = Driver::Get().model()->UnitMemory(ctx->device->unit);
  *free = m.free;
  *total = m.total;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size,
                                                            CUdeviceptr dptr) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  auto it = FindRangeLocked(dptr, 1);
  if (it == Driver::Get().allocations.end()) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = it->first;
  if (size != nullptr) *size = it->second.size;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int) {
  Context* ctx = nullptr;
  if (CUresult r = CurrentActiveContext(&ctx); r != CUDA_SUCCESS) return r;
  if (pp == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  *pp = std::aligned_alloc(4096, (bytesize + 4095) / 4096 * 4096);
  return *pp == nullptr ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return cuMemHostAlloc(pp, bytesize, 0);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemFreeHost(void* p) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::free(p);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return Copy(P(dst), P(src), n, false, false, nullptr, false);
}
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n,
                                                  CUstream s) {
  return Copy(P(dst), P(src), n, false, false, s, true);
}
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return Copy(P(dst), src, n, true, false, nullptr, false);
}
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return Copy(dst, P(src), n, false, true, nullptr, false);
}
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return Copy(P(dst), P(src), n, true, true, nullptr, false);
}
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n,
                                                         CUstream s) {
  return Copy(P(dst), src, n, true, false, s, true);
}
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n,
                                                         CUstream s) {
  return Copy(dst, P(src), n, false, true, s, true);
}
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n,
                                                         CUstream s) {
  return Copy(P(dst), P(src), n, true, true, s, true);
}
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
  return Memset<unsigned char>(dst, v, n, nullptr, false);
}
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemsetD16_v2(CUdeviceptr dst, unsigned short v, size_t n) {
  return Memset<unsigned short>(dst, v, n, nullptr, false);
}
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dst, unsigned int v, size_t n) {
  return Memset<unsigned int>(dst, v, n, nullptr, false);
}
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n,
                                                    CUstream s) {
  return Memset<unsigned char>(dst, v, n, s, true);
}
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n,
                                                     CUstream s) {
  return Memset<unsigned short>(dst, v, n, s, true);
}
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n,
                                                     CUstream s) {
  return Memset<unsigned int>(dst, v, n, s, true);
}

// Entry points with the same signature and behaviour: legacy names whose
// _v2 changed nothing visible here, and the per-thread-default-stream
// variants (the simulator gives every thread the legacy default stream).
GPUSLICE_CU_ALIAS(cuMemcpy_ptds, cuMemcpy)
GPUSLICE_CU_ALIAS(cuMemcpyAsync_ptsz, cuMemcpyAsync)
GPUSLICE_CU_ALIAS(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_v2)
GPUSLICE_CU_ALIAS(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_v2)
GPUSLICE_CU_ALIAS(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD_v2)
GPUSLICE_CU_ALIAS(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_v2)
GPUSLICE_CU_ALIAS(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_v2)
GPUSLICE_CU_ALIAS(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync_v2)
GPUSLICE_CU_ALIAS(cuMemsetD8_v2_ptds, cuMemsetD8_v2)
GPUSLICE_CU_ALIAS(cuMemsetD16_v2_ptds, cuMemsetD16_v2)
GPUSLICE_CU_ALIAS(cuMemsetD32_v2_ptds, cuMemsetD32_v2)
GPUSLICE_CU_ALIAS(cuMemsetD8Async_ptsz, cuMemsetD8Async)
GPUSLICE_CU_ALIAS(cuMemsetD16Async_ptsz, cuMemsetD16Async)
GPUSLICE_CU_ALIAS(cuMemsetD32Async_ptsz, cuMemsetD32Async)
