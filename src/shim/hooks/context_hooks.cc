// Memory the driver takes for itself: each context (a few hundred MiB on a
// real GPU) and each loaded module. No allocation call shows it.
//
// A context is admitted before the driver creates it, on every route that
// creates one (cuCtxCreate_v2/v3/v4, cuDevicePrimaryCtxRetain: the CUDA
// runtime's implicit context; the same wrappers answer dlsym and
// cuGetProcAddress): its expected size is reserved in the slice region, the
// creation is refused with CUDA_ERROR_OUT_OF_MEMORY when it does not fit,
// and a destroy or release returns exactly what was charged
// (context_admission.h). A context that proves larger than reserved and
// takes the slice over its limit is undone and refused.
//
// Module memory is learnt after the fact from NVML's per-process usage
// (ResyncDriverMemory) and counted (later allocations see it), but a module
// load is never refused.

#include "shim/context_admission.h"
#include "slice/region/region_layout.h"
#include "shim/hooks/wrapper_util.h"

namespace gpuslice::shim {
namespace {

constexpr int kMaxOrdinals = 64;

// A cuCtxCreate* on `device` through `create`, admitted before it runs.
template <typename Create>
CUresult CreateAdmitted(CUdevice device, CUcontext* ctx, Create create) {
  ContextTicket ticket;
  CUresult r = ReserveCreatedContext(device, &ticket);
  if (r != CUDA_SUCCESS) return r;
  r = create();
  if (r != CUDA_SUCCESS) {
    CancelContext(ticket);
    return r;
  }
  if (!SettleCreatedContext(ticket, *ctx)) {
    const ContextRecord record = TakeCreatedContext(*ctx);
    (void)REAL(cuCtxDestroy_v2)(*ctx);
    ReturnCreatedContext(record);
    ResyncDriverMemory(ticket.dev);
    *ctx = nullptr;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return r;
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
  if (!enforcing) return real(ctx, flags, device);
  return CreateAdmitted(device, ctx, [&] { return real(ctx, flags, device); });
}

GPUSLICE_EXPORT CUresult cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam* params, int num_params,
                                        unsigned int flags, CUdevice device) {
  GPUSLICE_PROLOGUE(cuCtxCreate_v3);
  if (!enforcing) return real(ctx, params, num_params, flags, device);
  return CreateAdmitted(device, ctx, [&] { return real(ctx, params, num_params, flags, device); });
}

// Guarded as its entry in hooks.def: older headers lack CUctxCreateParams.
#if CUDA_VERSION >= 12050
GPUSLICE_EXPORT CUresult cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams* params,
                                        unsigned int flags, CUdevice device) {
  GPUSLICE_PROLOGUE(cuCtxCreate_v4);
  if (!enforcing) return real(ctx, params, flags, device);
  return CreateAdmitted(device, ctx, [&] { return real(ctx, params, flags, device); });
}
#endif

GPUSLICE_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  GPUSLICE_PROLOGUE(cuCtxDestroy_v2);
  if (!enforcing) return real(ctx);
  // Taken out first: once the driver has destroyed it, another thread's
  // creation may get the same handle.
  const ContextRecord record = TakeCreatedContext(ctx);
  CUresult r = real(ctx);
  if (r != CUDA_SUCCESS) {
    RestoreCreatedContext(ctx, record);
    return r;
  }
  ReturnCreatedContext(record);
  ResyncAll();
  return r;
}

GPUSLICE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  GPUSLICE_PROLOGUE(cuDevicePrimaryCtxRetain);
  if (!enforcing) return real(ctx, device);
  ContextTicket ticket;
  CUresult r = ReservePrimaryContext(device, &ticket);
  if (r != CUDA_SUCCESS) return r;
  r = real(ctx, device);
  if (r != CUDA_SUCCESS) {
    CancelContext(ticket);
    return r;
  }
  if (!SettlePrimaryContext(ticket, device)) {
    (void)REAL(cuDevicePrimaryCtxRelease_v2)(device);
    PrimaryContextReleased(device);
    *ctx = nullptr;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return r;
}

GPUSLICE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  GPUSLICE_PROLOGUE(cuDevicePrimaryCtxRelease_v2);
  CUresult r = real(device);
  if (enforcing && r == CUDA_SUCCESS) PrimaryContextReleased(device);
  return r;
}

GPUSLICE_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice device) {
  GPUSLICE_PROLOGUE(cuDevicePrimaryCtxReset_v2);
  CUresult r = real(device);
  if (enforcing && r == CUDA_SUCCESS) PrimaryContextReset(device);
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
