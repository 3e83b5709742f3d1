// Memory the driver takes for itself: each context (a few hundred MiB on a
// real GPU) and each loaded module. It never passes through an allocation
// call, so it is learnt after the fact from NVML's per-process usage
// (ResyncDriverMemory) whenever a context or module comes or goes.
//
// A context whose memory does not fit in the slice is undone and its
// creation fails with CUDA_ERROR_OUT_OF_MEMORY. Module memory is counted
// (later allocations see it) but a module load is never refused.

#include "shim/region_layout.h"
#include "shim/wrapper_util.h"

namespace gpuslice::shim {
namespace {

constexpr int kMaxOrdinals = 64;

// Called after a context on `ordinal` was created (or a primary context
// retained). Learns its memory; if the slice is now over its limit because
// of it, calls `undo` and refuses.
template <typename Undo>
CUresult AfterContext(CUdevice ordinal, Undo undo) {
  int dev = SliceDeviceForOrdinal(ordinal);
  if (dev < 0) return CUDA_SUCCESS;
  uint64_t before = OwnSlot().overhead_bytes[dev].load(std::memory_order_relaxed);
  // A first context costs what the slice's first one did: charge the cached
  // size and skip NVML's initialisation (the start-up cost of every process).
  // Growth beyond it (lazy loading, modules) is learnt at the next module or
  // context event, which asks NVML as before.
  if (!ChargeCachedContext(dev)) {
    if (!ResyncDriverMemory(dev)) return CUDA_SUCCESS;
    if (before == 0) LearnContextSize(dev);
  }
  uint64_t after = OwnSlot().overhead_bytes[dev].load(std::memory_order_relaxed);
  uint64_t limit = SliceLimit(dev);
  if (after > before && limit != layout::kUnlimited && SliceUsed(dev) > limit) {
    undo();
    ResyncDriverMemory(dev);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

// After a context or module went away: re-learn every device we know.
void ResyncAll() {
  for (CUdevice d = 0; d < kMaxOrdinals; ++d) {
    int dev = SliceDeviceForOrdinal(d);
    if (dev == kNoContext) break;  // No such ordinal.
    if (dev >= 0) ResyncDriverMemory(dev);
  }
}

void AfterModuleChange() {
  int dev = CurrentSliceDevice();
  if (dev >= 0) ResyncDriverMemory(dev);
}

}  // namespace
}  // namespace gpuslice::shim

using namespace gpuslice::shim;

GPUSLICE_EXPORT CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int flags, CUdevice device) {
  GPUSLICE_PROLOGUE(cuCtxCreate_v2);
  CUresult r = real(ctx, flags, device);
  if (!enforcing || r != CUDA_SUCCESS) return r;
  return AfterContext(device, [&] { REAL(cuCtxDestroy_v2)(*ctx); });
}

GPUSLICE_EXPORT CUresult cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam* params,
                                        int num_params, unsigned int flags, CUdevice device) {
  GPUSLICE_PROLOGUE(cuCtxCreate_v3);
  CUresult r = real(ctx, params, num_params, flags, device);
  if (!enforcing || r != CUDA_SUCCESS) return r;
  return AfterContext(device, [&] { REAL(cuCtxDestroy_v2)(*ctx); });
}

// Guarded as its entry in hooks.def: older headers lack CUctxCreateParams.
#if CUDA_VERSION >= 12050
GPUSLICE_EXPORT CUresult cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams* params,
                                        unsigned int flags, CUdevice device) {
  GPUSLICE_PROLOGUE(cuCtxCreate_v4);
  CUresult r = real(ctx, params, flags, device);
  if (!enforcing || r != CUDA_SUCCESS) return r;
  return AfterContext(device, [&] { REAL(cuCtxDestroy_v2)(*ctx); });
}
#endif

GPUSLICE_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  GPUSLICE_PROLOGUE(cuCtxDestroy_v2);
  CUresult r = real(ctx);
  if (enforcing && r == CUDA_SUCCESS) ResyncAll();
  return r;
}

GPUSLICE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  GPUSLICE_PROLOGUE(cuDevicePrimaryCtxRetain);
  CUresult r = real(ctx, device);
  if (!enforcing || r != CUDA_SUCCESS) return r;
  return AfterContext(device, [&] { REAL(cuDevicePrimaryCtxRelease_v2)(device); });
}

GPUSLICE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  GPUSLICE_PROLOGUE(cuDevicePrimaryCtxRelease_v2);
  CUresult r = real(device);
  if (enforcing && r == CUDA_SUCCESS) {
    int dev = SliceDeviceForOrdinal(device);
    if (dev >= 0) ResyncDriverMemory(dev);
  }
  return r;
}

GPUSLICE_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice device) {
  GPUSLICE_PROLOGUE(cuDevicePrimaryCtxReset_v2);
  CUresult r = real(device);
  if (enforcing && r == CUDA_SUCCESS) {
    int dev = SliceDeviceForOrdinal(device);
    if (dev >= 0) ResyncDriverMemory(dev);
  }
  return r;
}

GPUSLICE_EXPORT CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  GPUSLICE_PROLOGUE(cuModuleLoad);
  CUresult r = real(module, fname);
  if (enforcing && r == CUDA_SUCCESS) AfterModuleChange();
  return r;
}

GPUSLICE_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  GPUSLICE_PROLOGUE(cuModuleLoadData);
  CUresult r = real(module, image);
  if (enforcing && r == CUDA_SUCCESS) AfterModuleChange();
  return r;
}

GPUSLICE_EXPORT CUresult cuModuleLoadDataEx(CUmodule* module, const void* image,
                                            unsigned int num_options, CUjit_option* options,
                                            void** option_values) {
  GPUSLICE_PROLOGUE(cuModuleLoadDataEx);
  CUresult r = real(module, image, num_options, options, option_values);
  if (enforcing && r == CUDA_SUCCESS) AfterModuleChange();
  return r;
}

GPUSLICE_EXPORT CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fat_cubin) {
  GPUSLICE_PROLOGUE(cuModuleLoadFatBinary);
  CUresult r = real(module, fat_cubin);
  if (enforcing && r == CUDA_SUCCESS) AfterModuleChange();
  return r;
}

GPUSLICE_EXPORT CUresult cuModuleUnload(CUmodule module) {
  GPUSLICE_PROLOGUE(cuModuleUnload);
  CUresult r = real(module);
  if (enforcing && r == CUDA_SUCCESS) AfterModuleChange();
  return r;
}

// CUlibrary arrived with CUDA 12.0; guarded as in hooks.def.
#if CUDA_VERSION >= 12000
GPUSLICE_EXPORT CUresult cuLibraryLoadData(CUlibrary* library, const void* code,
                                           CUjit_option* jit_options, void** jit_values,
                                           unsigned int num_jit, CUlibraryOption* lib_options,
                                           void** lib_values, unsigned int num_lib) {
  GPUSLICE_PROLOGUE(cuLibraryLoadData);
  CUresult r =
      real(library, code, jit_options, jit_values, num_jit, lib_options, lib_values, num_lib);
  if (enforcing && r == CUDA_SUCCESS) AfterModuleChange();
  return r;
}

GPUSLICE_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* file,
                                               CUjit_option* jit_options, void** jit_values,
                                               unsigned int num_jit, CUlibraryOption* lib_options,
                                               void** lib_values, unsigned int num_lib) {
  GPUSLICE_PROLOGUE(cuLibraryLoadFromFile);
  CUresult r =
      real(library, file, jit_options, jit_values, num_jit, lib_options, lib_values, num_lib);
  if (enforcing && r == CUDA_SUCCESS) AfterModuleChange();
  return r;
}

GPUSLICE_EXPORT CUresult cuLibraryUnload(CUlibrary library) {
  GPUSLICE_PROLOGUE(cuLibraryUnload);
  CUresult r = real(library);
  if (enforcing && r == CUDA_SUCCESS) AfterModuleChange();
  return r;
}
#endif  // CUDA_VERSION >= 12000
