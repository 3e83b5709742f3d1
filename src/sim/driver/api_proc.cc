// cuGetProcAddress and error strings, both driven by .def tables.

#include <cstring>

#include "sim/driver/driver.h"

using namespace gpuslice::sim::driver;  // NOLINT: entry points are extern "C".

namespace {

#if CUDA_VERSION >= 12000
using ProcStatus = CUdriverProcAddressQueryResult;
#else
// cuda.h before 12.0 has no status out-parameter (no cuGetProcAddress_v2);
// the lookup still tells the cases apart internally.
enum ProcStatus {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};
#endif

struct EntryPoint {
  const char* name;
  int version;
  bool per_thread;
  void* fn;
};

const EntryPoint kEntryPoints[] = {
#define CU_ENTRY(name, version, symbol) {#name, version, false, reinterpret_cast<void*>(&symbol)},
#define CU_PTDS(name, version, symbol) {#name, version, true, reinterpret_cast<void*>(&symbol)},
#include "sim/driver/entry_points.def"
#undef CU_ENTRY
#undef CU_PTDS
};

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};

const ErrorText kErrors[] = {
#define CU_ERROR(code, text) {code, #code, text},
#include "sim/driver/errors.def"
#undef CU_ERROR
};

CUresult Lookup(const char* symbol, void** pfn, int version, cuuint64_t flags, ProcStatus* status) {
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  constexpr cuuint64_t kKnown =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if ((flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const EntryPoint* best = nullptr;
  bool known = false;
  // Per-thread variants first when asked for; otherwise (or if the symbol
  // has none) the legacy-stream entries.
  for (int pass = per_thread ? 0 : 1; pass < 2 && best == nullptr; ++pass) {
    bool want_pt = pass == 0;
    for (const EntryPoint& e : kEntryPoints) {
      if (std::strcmp(e.name, symbol) != 0) continue;
      known = true;
      if (e.per_thread != want_pt || e.version > version) continue;
      if (best == nullptr || e.version > best->version) best = &e;
    }
  }
  if (best == nullptr && !known) {
    // An entry point of cuda.h we do not implement: its stub, which is also
    // what the exported symbol is, so both routes give NOT_SUPPORTED when
    // called. The requested version does not matter: every stub is alike.
    if (void* stub = FindStub(symbol, per_thread)) {
      *pfn = stub;
      if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  }
  if (best == nullptr) {
    if (known && status != nullptr) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = best->fn;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace

#if CUDA_VERSION >= 12000
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn,
                                                        int cudaVersion, cuuint64_t flags,
                                                        CUdriverProcAddressQueryResult* status) {
  return Lookup(symbol, pfn, cudaVersion, flags, status);
}
#endif

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn,
                                                     int cudaVersion, cuuint64_t flags) {
  return Lookup(symbol, pfn, cudaVersion, flags, nullptr);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorText& e : kErrors) {
    if (e.code == error) {
      *str = e.name;
      return CUDA_SUCCESS;
    }
  }
  *str = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorText& e : kErrors) {
    if (e.code == error) {
      *str = e.text;
      return CUDA_SUCCESS;
    }
  }
  *str = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}
