#pragma once

// The CUDA driver API as the shim sees it: cuda.h and the PFN_ types of
// cudaTypedefs.h, minus the one name macro that collides with a symbol we
// define (cuda.h maps cuGetProcAddress to cuGetProcAddress_v2, but the
// driver exports both and we interpose both), plus NVML's ABI, plus the
// cuGetProcAddress_v2 ABI for headers older than CUDA 12.0.

#include <cuda.h>
#include <cudaTypedefs.h>

#include "core/nvml_abi.h"

#undef cuGetProcAddress

#if CUDA_VERSION < 12000
// CUDA 12+ runtimes reach every entry point through cuGetProcAddress_v2, so
// the shim must interpose it whatever header it is built against; pre-12.0
// headers lack its types. These match CUDA 12.0's cuda.h/cudaTypedefs.h
// (ABI facts: the enum's values and the function's parameter list).
typedef enum CUdriverProcAddressQueryResult_enum {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
} CUdriverProcAddressQueryResult;

typedef CUresult(CUDAAPI* PFN_cuGetProcAddress_v12000)(const char* symbol, void** pfn,
                                                       int driverVersion, cuuint64_t flags,
                                                       CUdriverProcAddressQueryResult* symbolFound);
#endif  // CUDA_VERSION < 12000
