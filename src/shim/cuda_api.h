#pragma once

// The CUDA driver API as the shim sees it: cuda.h and the PFN_ types of
// cudaTypedefs.h, minus the one name macro that collides with a symbol we
// define (cuda.h maps cuGetProcAddress to cuGetProcAddress_v2, but the
// driver exports both and we interpose both), plus NVML's ABI.

#include <cuda.h>
#include <cudaTypedefs.h>

#include "core/nvml_abi.h"

#undef cuGetProcAddress
