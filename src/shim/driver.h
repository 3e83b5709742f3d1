#pragma once

// Finding the real driver, the real NVML and the real dlsym/dlvsym, without
// ever going through our own exported symbols.
//
// libcuda.so.1 is opened with dlopen(RTLD_NOW | RTLD_LOCAL) on the first
// CUDA call and libnvidia-ml.so.1 on the first NVML call; both stay loaded.
// The real dlsym/dlvsym come from glibc's own symbol table (we interpose the
// exported names, so calling "dlsym" from here would reach ourselves).

#include "shim/base/cuda_api.h"

extern "C" {
// Used by the dlsym/dlvsym trampolines (dl_hooks.cc), hence C names.
extern void* (*gpuslice_real_dlsym)(void*, const char*);
extern void* (*gpuslice_real_dlvsym)(void*, const char*, const char*);
// Resolves both if needed; returns gpuslice_real_dlsym (never null on glibc).
void* gpuslice_resolve_real_dlsym();
void* gpuslice_resolve_real_dlvsym();
}

namespace gpuslice::shim {

// Driver functions the shim calls for itself (not interposed).
struct DriverExtras {
  PFN_cuCtxGetDevice_v2000 cuCtxGetDevice = nullptr;
  PFN_cuDeviceGetUuid_v11040 get_uuid_v2 = nullptr;
  PFN_cuDeviceGetUuid_v9020 get_uuid = nullptr;
  PFN_cuMemPoolGetAttribute_v11020 cuMemPoolGetAttribute = nullptr;
  PFN_cuDeviceGetMemPool_v11020 cuDeviceGetMemPool = nullptr;
  PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent = nullptr;
  // Whether a retain will create the primary context (context_admission.cc).
  PFN_cuDevicePrimaryCtxGetState_v7000 cuDevicePrimaryCtxGetState = nullptr;
};

// Loads the driver and fills g_real for every CUDA hook. Idempotent and
// thread-safe; false if libcuda.so.1 cannot be opened (then every wrapper
// answers CUDA_ERROR_NOT_INITIALIZED-like errors; see wrappers).
bool LoadCuda();
bool CudaLoaded();
void* CudaHandle();
const DriverExtras& Extras();

// NVML functions the shim calls for itself.
struct NvmlFunctions {
  nvmlInit_v2_fn nvmlInit_v2 = nullptr;
  nvmlDeviceGetHandleByUUID_fn nvmlDeviceGetHandleByUUID = nullptr;
  nvmlDeviceGetUUID_fn nvmlDeviceGetUUID = nullptr;
  nvmlDeviceGetComputeRunningProcesses_v3_fn nvmlDeviceGetComputeRunningProcesses_v3 = nullptr;
};

// Loads libnvidia-ml.so.1 and fills g_real for NVML hooks. Does not call
// nvmlInit (see NvmlForOwnUse).
bool LoadNvml();
void* NvmlHandle();
// The NVML functions above, resolved by LoadNvml (no nvmlInit implied).
const NvmlFunctions& NvmlSymbols();
// NVML initialised for the shim's own queries (context memory), or nullptr.
const NvmlFunctions* NvmlForOwnUse();

}  // namespace gpuslice::shim
