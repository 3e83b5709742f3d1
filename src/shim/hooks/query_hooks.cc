// Memory queries show the slice, not the device: total = the limit,
// free = limit - slice usage, and never more than the device really has
// free (other tenants may hold memory the slice is entitled to).

#include <algorithm>

#include "shim/base/config.h"
#include "shim/driver.h"
#include "slice/region/region_layout.h"
#include "shim/hooks/wrapper_util.h"

namespace gpuslice::shim {
namespace {

struct View {
  uint64_t total;
  uint64_t free;
};

// The slice's view of a device whose driver reports `total`/`free`.
View SliceView(int dev, uint64_t total, uint64_t free) {
  uint64_t limit = SliceLimit(dev);
  if (limit == slice::layout::kUnlimited) return {total, free};
  uint64_t used = SliceUsed(dev);
  uint64_t left = limit > used ? limit - used : 0;
  View v{std::min(total, limit), std::min(free, left)};
  v.free = std::min(v.free, v.total);
  return v;
}

// The slice device behind an NVML handle, or -1.
int SliceDeviceForNvml(nvmlDevice_t device) {
  nvmlDeviceGetUUID_fn get_uuid = NvmlSymbols().nvmlDeviceGetUUID;
  if (get_uuid == nullptr) return -1;
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  if (get_uuid(device, uuid, sizeof(uuid)) != NVML_SUCCESS) return -1;
  return SliceDeviceForUuid(uuid);
}

}  // namespace
}  // namespace gpuslice::shim

using namespace gpuslice::shim;

GPUSLICE_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  GPUSLICE_PROLOGUE(cuMemGetInfo_v2);
  CUresult r = real(free, total);
  if (!enforcing || r != CUDA_SUCCESS || free == nullptr || total == nullptr) return r;
  int dev = CurrentSliceDevice();
  if (dev == kRefused) {
    *free = 0;
    *total = 0;
  } else if (dev >= 0) {
    View v = SliceView(dev, *total, *free);
    *total = v.total;
    *free = v.free;
  }
  return r;
}

GPUSLICE_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice device) {
  GPUSLICE_LOOKUP_PROLOGUE(cuDeviceTotalMem_v2);
  CUresult r = real(bytes, device);
  if (!enforcing || r != CUDA_SUCCESS || bytes == nullptr) return r;
  int dev = SliceDeviceForOrdinal(device);
  if (dev == kRefused) {
    *bytes = 0;
  } else if (dev >= 0) {
    *bytes = SliceView(dev, *bytes, *bytes).total;
  }
  return r;
}

GPUSLICE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  if (!LoadNvml()) return NVML_ERROR_LIBRARY_NOT_FOUND;
  const bool enforcing = Enforcing();
  auto real = REAL(nvmlDeviceGetMemoryInfo);
  if (real == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  nvmlReturn_t r = real(device, memory);
  if (!enforcing || r != NVML_SUCCESS || memory == nullptr) return r;
  int dev = SliceDeviceForNvml(device);
  if (dev < 0) return r;
  View v = SliceView(dev, memory->total, memory->free);
  memory->total = v.total;
  memory->free = v.free;
  memory->used = v.total - v.free;
  return r;
}

GPUSLICE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                        nvmlMemory_v2_t* memory) {
  if (!LoadNvml()) return NVML_ERROR_LIBRARY_NOT_FOUND;
  const bool enforcing = Enforcing();
  auto real = REAL(nvmlDeviceGetMemoryInfo_v2);
  if (real == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  nvmlReturn_t r = real(device, memory);
  if (!enforcing || r != NVML_SUCCESS || memory == nullptr) return r;
  int dev = SliceDeviceForNvml(device);
  if (dev < 0) return r;
  View v = SliceView(dev, memory->total, memory->free);
  memory->total = v.total;
  memory->free = v.free;
  memory->used = v.total - v.free;
  memory->reserved = std::min(memory->reserved, memory->used);
  return r;
}
