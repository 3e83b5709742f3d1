// Synchronous allocation routes: cuMemAlloc, cuMemAllocPitch,
// cuMemAllocManaged, cuMemFree, the virtual memory API (cuMemCreate /
// cuMemRelease) and arrays. Each charges the slice before the driver
// allocates and uncharges after the driver frees.

#include "shim/pool_tracker.h"
#include "shim/hooks/wrapper_util.h"

namespace gpuslice::shim {

void ReturnCharge(const AllocInfo& info) {
  if (info.kind == kKindPool) {
    // A pool destroyed meanwhile has already returned its whole charge.
    int p = FindPool(reinterpret_cast<CUmemoryPool>(info.extra));
    if (p >= 0) PoolFreed(p, info.bytes);
  } else {
    Unadmit(int(info.device), info.bytes);
  }
}

namespace {

uint64_t ElementBytes(CUarray_format format) {
  switch (format) {
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
      return 16;  // Packed/compressed formats: never more than 16 bytes/element.
  }
}

// Bytes of a W x H x D array (H, D of 0 mean 1), or false on overflow.
bool ArrayBytes(uint64_t width, uint64_t height, uint64_t depth, uint64_t channels,
                CUarray_format format, uint64_t* bytes) {
  uint64_t b = ElementBytes(format);
  return !__builtin_mul_overflow(b, channels, &b) && !__builtin_mul_overflow(b, width, &b) &&
         !__builtin_mul_overflow(b, height == 0 ? 1 : height, &b) &&
         !__builtin_mul_overflow(b, depth == 0 ? 1 : depth, &b) && (*bytes = b, true);
}

// The largest pitch alignment the driver uses; the upper bound we reserve
// before we know the real pitch.
constexpr uint64_t kMaxPitchAlignment = 1024;

}  // namespace
}  // namespace gpuslice::shim

using namespace gpuslice::shim;

GPUSLICE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  GPUSLICE_PROLOGUE(cuMemAlloc_v2);
  if (!enforcing || dptr == nullptr) return real(dptr, bytesize);
  int dev = CurrentSliceDevice();
  if (dev == kNoContext) return real(dptr, bytesize);
  if (dev == kRefused) return CUDA_ERROR_OUT_OF_MEMORY;
  return ChargeAround(
      Pointers(), dev, bytesize, [&] { return real(dptr, bytesize); },
      [&] { return uint64_t(*dptr); }, [&] { REAL(cuMemFree_v2)(*dptr); });
}

GPUSLICE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize,
                                           unsigned int flags) {
  GPUSLICE_PROLOGUE(cuMemAllocManaged);
  if (!enforcing || dptr == nullptr) return real(dptr, bytesize, flags);
  int dev = CurrentSliceDevice();
  if (dev == kNoContext) return real(dptr, bytesize, flags);
  if (dev == kRefused) return CUDA_ERROR_OUT_OF_MEMORY;
  // Charged in full: managed memory may migrate to the device at any time.
  return ChargeAround(
      Pointers(), dev, bytesize, [&] { return real(dptr, bytesize, flags); },
      [&] { return uint64_t(*dptr); }, [&] { REAL(cuMemFree_v2)(*dptr); });
}

GPUSLICE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width,
                                            size_t height, unsigned int element_size) {
  GPUSLICE_PROLOGUE(cuMemAllocPitch_v2);
  if (!enforcing || dptr == nullptr || pitch == nullptr) {
    return real(dptr, pitch, width, height, element_size);
  }
  int dev = CurrentSliceDevice();
  if (dev == kNoContext) return real(dptr, pitch, width, height, element_size);
  if (dev == kRefused) return CUDA_ERROR_OUT_OF_MEMORY;
  // Reserve an upper bound, then settle on the real pitch x height.
  uint64_t row = (uint64_t(width) + kMaxPitchAlignment - 1) / kMaxPitchAlignment *
                 kMaxPitchAlignment;
  uint64_t bound = 0;
  if (__builtin_mul_overflow(row, uint64_t(height), &bound)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!Admit(dev, bound)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = real(dptr, pitch, width, height, element_size);
  if (r != CUDA_SUCCESS) {
    Unadmit(dev, bound);
    return r;
  }
  uint64_t actual = uint64_t(*pitch) * height;
  if (actual < bound) Unadmit(dev, bound - actual);
  if (actual > bound) Force(dev, actual - bound);  // A pitch beyond any known alignment.
  if (!Pointers().Insert(*dptr, AllocInfo{actual, uint32_t(dev), kKindPlain, 0})) {
    REAL(cuMemFree_v2)(*dptr);
    Unadmit(dev, actual);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return r;
}

GPUSLICE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  GPUSLICE_PROLOGUE(cuMemFree_v2);
  if (!enforcing) return real(dptr);
  return UnchargeAround(Pointers(), dptr, [&] { return real(dptr); });
}

GPUSLICE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                     const CUmemAllocationProp* prop, unsigned long long flags) {
  GPUSLICE_PROLOGUE(cuMemCreate);
  if (!enforcing || handle == nullptr || prop == nullptr ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return real(handle, size, prop, flags);  // Host memory is not the slice's.
  }
  int dev = SliceDeviceForOrdinal(prop->location.id);
  if (dev == kNoContext) return real(handle, size, prop, flags);
  if (dev == kRefused) return CUDA_ERROR_OUT_OF_MEMORY;
  return ChargeAround(
      VmmHandles(), dev, size, [&] { return real(handle, size, prop, flags); },
      [&] { return uint64_t(*handle); }, [&] { REAL(cuMemRelease)(*handle); });
}

GPUSLICE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  GPUSLICE_PROLOGUE(cuMemRelease);
  if (!enforcing) return real(handle);
  return UnchargeAround(VmmHandles(), handle, [&] { return real(handle); });
}

GPUSLICE_EXPORT CUresult cuArrayCreate_v2(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  GPUSLICE_PROLOGUE(cuArrayCreate_v2);
  if (!enforcing || handle == nullptr || desc == nullptr) return real(handle, desc);
  uint64_t bytes = 0;
  if (!ArrayBytes(desc->Width, desc->Height, 1, desc->NumChannels, desc->Format, &bytes)) {
    return real(handle, desc);  // The driver rejects such sizes itself.
  }
  int dev = CurrentSliceDevice();
  if (dev == kNoContext) return real(handle, desc);
  if (dev == kRefused) return CUDA_ERROR_OUT_OF_MEMORY;
  return ChargeAround(
      Arrays(), dev, bytes, [&] { return real(handle, desc); },
      [&] { return reinterpret_cast<uint64_t>(*handle); }, [&] { REAL(cuArrayDestroy)(*handle); });
}

GPUSLICE_EXPORT CUresult cuArray3DCreate_v2(CUarray* handle,
                                            const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  GPUSLICE_PROLOGUE(cuArray3DCreate_v2);
  if (!enforcing || handle == nullptr || desc == nullptr) return real(handle, desc);
  uint64_t bytes = 0;
  if (!ArrayBytes(desc->Width, desc->Height, desc->Depth, desc->NumChannels, desc->Format,
                  &bytes)) {
    return real(handle, desc);
  }
  int dev = CurrentSliceDevice();
  if (dev == kNoContext) return real(handle, desc);
  if (dev == kRefused) return CUDA_ERROR_OUT_OF_MEMORY;
  return ChargeAround(
      Arrays(), dev, bytes, [&] { return real(handle, desc); },
      [&] { return reinterpret_cast<uint64_t>(*handle); }, [&] { REAL(cuArrayDestroy)(*handle); });
}

GPUSLICE_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* handle,
                                                const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                                unsigned int levels) {
  GPUSLICE_PROLOGUE(cuMipmappedArrayCreate);
  if (!enforcing || handle == nullptr || desc == nullptr) return real(handle, desc, levels);
  uint64_t total = 0;
  for (unsigned int l = 0; l < levels && l < 64; ++l) {
    uint64_t w = desc->Width >> l, h = desc->Height >> l, d = desc->Depth >> l, bytes = 0;
    if (!ArrayBytes(w ? w : 1, h ? h : 1, d ? d : 1, desc->NumChannels, desc->Format, &bytes) ||
        __builtin_add_overflow(total, bytes, &total)) {
      return real(handle, desc, levels);
    }
  }
  int dev = CurrentSliceDevice();
  if (dev == kNoContext) return real(handle, desc, levels);
  if (dev == kRefused) return CUDA_ERROR_OUT_OF_MEMORY;
  return ChargeAround(
      Arrays(), dev, total, [&] { return real(handle, desc, levels); },
      [&] { return reinterpret_cast<uint64_t>(*handle); },
      [&] { REAL(cuMipmappedArrayDestroy)(*handle); });
}

GPUSLICE_EXPORT CUresult cuArrayDestroy(CUarray handle) {
  GPUSLICE_PROLOGUE(cuArrayDestroy);
  if (!enforcing) return real(handle);
  return UnchargeAround(Arrays(), reinterpret_cast<uint64_t>(handle), [&] { return real(handle); });
}

GPUSLICE_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray handle) {
  GPUSLICE_PROLOGUE(cuMipmappedArrayDestroy);
  if (!enforcing) return real(handle);
  return UnchargeAround(Arrays(), reinterpret_cast<uint64_t>(handle), [&] { return real(handle); });
}
