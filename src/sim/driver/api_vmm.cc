// The virtual memory management API: physical allocations (memfd-backed
// host memory, charged to the device), address reservations and mappings.

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "sim/driver/driver.h"

using namespace gpuslice::sim::driver;  // NOLINT: entry points are extern "C".

namespace {

constexpr size_t kGranularity = 2u << 20;

// Guarded by Driver::mu.
std::unordered_set<Physical*>& Physicals() { return Driver::Get().physicals; }
std::map<uintptr_t, size_t>& Reservations() {
  static auto* m = new std::map<uintptr_t, size_t>();
  return *m;
}
// Mapped range base -> physical allocation.
std::map<uintptr_t, Physical*>& Mappings() {
  static auto* m = new std::map<uintptr_t, Physical*>();
  return *m;
}

void MaybeFreeLocked(Physical* p) {
  if (!p->released || p->mappings > 0) return;
  close(p->fd);
  Driver::Get().model()->ReleaseMemory(p->unit, p->size);
  Physicals().erase(p);
  delete p;
}

bool InReservation(uintptr_t ptr, size_t size) {
  auto it = Reservations().upper_bound(ptr);
  if (it == Reservations().begin()) return false;
  --it;
  return ptr + size <= it->first + it->second;
}

CUresult CheckProp(const CUmemAllocationProp* prop, Device** dev) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (LookupDevice(prop->location.id, dev) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

}  // namespace

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemGetAllocationGranularity(
    size_t* granularity, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Device* d = nullptr;
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckProp(prop, &d); r != CUDA_SUCCESS) return r;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                                const CUmemAllocationProp* prop,
                                                unsigned long long flags) {
  Context* ctx = nullptr;
  if (CUresult r = CurrentActiveContext(&ctx); r != CUDA_SUCCESS) return r;
  Device* d = nullptr;
  if (handle == nullptr || flags != 0 || size == 0 || size % kGranularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = CheckProp(prop, &d); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  if (CUresult r = ToCuResult(drv.model()->ReserveMemory(d->unit, size)); r != CUDA_SUCCESS) {
    return r;
  }
  int fd = memfd_create("gpuslice-sim-vmm", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    drv.model()->ReleaseMemory(d->unit, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto* p = new Physical();
  p->fd = fd;
  p->size = size;
  p->unit = d->unit;
  Physicals().insert(p);
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(p);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Physical* p = reinterpret_cast<Physical*>(handle);
  if (Physicals().count(p) == 0 || p->released) return CUDA_ERROR_INVALID_VALUE;
  p->released = true;
  MaybeFreeLocked(p);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size,
                                                        size_t alignment, CUdeviceptr addr,
                                                        unsigned long long flags) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (ptr == nullptr || size == 0 || size % kGranularity != 0 || flags != 0 ||
      (alignment & (alignment - 1)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t align = std::max(alignment, kGranularity);
  // Over-reserve, then trim to the requested alignment.
  size_t span = size + align;
  void* hint = reinterpret_cast<void*>(addr);
  void* raw = mmap(hint, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t start = (reinterpret_cast<uintptr_t>(raw) + align - 1) / align * align;
  uintptr_t raw_end = reinterpret_cast<uintptr_t>(raw) + span;
  if (start > reinterpret_cast<uintptr_t>(raw))
    munmap(raw, start - reinterpret_cast<uintptr_t>(raw));
  if (raw_end > start + size) munmap(reinterpret_cast<void*>(start + size), raw_end - start - size);
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Reservations()[start] = size;
  *ptr = start;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  auto it = Reservations().find(ptr);
  if (it == Reservations().end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  auto m = Mappings().lower_bound(ptr);
  if (m != Mappings().end() && m->first < ptr + size)
    return CUDA_ERROR_INVALID_VALUE;  // Still mapped.
  munmap(reinterpret_cast<void*>(ptr), size);
  Reservations().erase(it);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                             CUmemGenericAllocationHandle handle,
                                             unsigned long long flags) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Physical* p = reinterpret_cast<Physical*>(handle);
  if (Physicals().count(p) == 0 || p->released) return CUDA_ERROR_INVALID_HANDLE;
  if (flags != 0 || size == 0 || ptr % kGranularity != 0 || size % kGranularity != 0 ||
      offset % kGranularity != 0 || offset + size > p->size || !InReservation(ptr, size) ||
      drv.allocations.count(ptr) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Mapped without access until cuMemSetAccess, as on the real driver.
  void* m = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, p->fd,
                 static_cast<off_t>(offset));
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  ++p->mappings;
  Mappings()[ptr] = p;
  Allocation a;
  a.kind = AllocKind::kPhysical;
  a.unit = p->unit;
  a.size = size;
  a.no_access = true;
  drv.allocations[ptr] = a;  // Makes the range valid for copies and memsets.
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  auto m = Mappings().find(ptr);
  auto a = drv.allocations.find(ptr);
  if (m == Mappings().end() || a == drv.allocations.end() || a->second.size != size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Back to a reserved, inaccessible range.
  mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  Physical* p = m->second;
  Mappings().erase(m);
  drv.allocations.erase(a);
  --p->mappings;
  MaybeFreeLocked(p);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size,
                                                   const CUmemAccessDesc* desc, size_t count) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  // Every page of the range must be mapped.
  for (uintptr_t p = ptr; p < ptr + size;) {
    auto a = drv.allocations.find(p);
    if (a == drv.allocations.end() || a->second.kind != AllocKind::kPhysical) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    p += a->second.size;
  }
  int prot = PROT_NONE;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    Device* d = nullptr;
    if (LookupDevice(desc[i].location.id, &d) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      prot = PROT_READ | PROT_WRITE;
    else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE)
      prot = PROT_READ;
  }
  if (mprotect(reinterpret_cast<void*>(ptr), size, prot) != 0) return CUDA_ERROR_INVALID_VALUE;
  for (uintptr_t p = ptr; p < ptr + size;) {
    Allocation& a = drv.allocations.find(p)->second;
    a.no_access = prot == PROT_NONE;
    p += a.size;
  }
  return CUDA_SUCCESS;
}
