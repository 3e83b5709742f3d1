#include "shim/hooks/proc_address.h"

#include <cstring>

#include "shim/base/log.h"
#include "shim/hooks/wrapper_util.h"

namespace gpuslice::shim {

ProcMatch MatchProc(const char* name, int cuda_version, uint64_t flags) {
  ProcMatch match;
  if (name == nullptr) return match;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  int best_version = -1;
  bool named = false;
  bool deny_older = false;
  for (int i = 0; i < kHookCount; ++i) {
    const HookInfo& h = kHooks[i];
    if (h.library != HookLibrary::kCuda || std::strcmp(h.proc_name, name) != 0) continue;
    named = true;
    if (h.older == OlderVersions::kDenyOlder) deny_older = true;
    if (h.stream == StreamFlavor::kPerThreadStream && !per_thread) continue;
    if (h.stream == StreamFlavor::kLegacyStream && per_thread) continue;
    if (h.version <= cuda_version && h.version > best_version) {
      best_version = h.version;
      match.hook = HookId(i);
    }
  }
  if (named && match.hook == kHookCount) match.deny = deny_older;
  return match;
}

void* RedirectProc(const char* name, void* found, int cuda_version, uint64_t flags,
                   bool enforcing) {
  if (found == nullptr || Disabled()) return found;
  for (int i = 0; i < kHookCount; ++i) {
    if (g_real[i] == found) return kWrappers[i];
    if (kWrappers[i] == found) return found;
  }
  // Versions newer than our cuda.h may have changed a signature: hand out a
  // wrapper by name only where the table is known to be right.
  if (cuda_version > CUDA_VERSION) return found;
  ProcMatch match = MatchProc(name, cuda_version, flags);
  if (match.hook != kHookCount && g_real[match.hook] != nullptr) return kWrappers[match.hook];
  if (match.deny && enforcing) {
    GPUSLICE_LOG(kWarn, "refusing %s for CUDA version %d: it would bypass the memory limit",
                 name, cuda_version);
    return nullptr;
  }
  return found;
}

}  // namespace gpuslice::shim

using namespace gpuslice::shim;

GPUSLICE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                                          cuuint64_t flags) {
  GPUSLICE_LOOKUP_PROLOGUE(cuGetProcAddress);
  CUresult r = real(symbol, pfn, cuda_version, flags);
  if (r != CUDA_SUCCESS || pfn == nullptr || *pfn == nullptr) return r;
  *pfn = RedirectProc(symbol, *pfn, cuda_version, flags, enforcing);
  return *pfn != nullptr ? r : CUDA_ERROR_NOT_FOUND;
}

// Defined in every build (cuda_api.h supplies the CUDA 12.0 types to older
// headers): this is the route of CUDA 12+ runtimes to everything.
GPUSLICE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                             cuuint64_t flags,
                                             CUdriverProcAddressQueryResult* status) {
  GPUSLICE_LOOKUP_PROLOGUE(cuGetProcAddress_v2);
  CUresult r = real(symbol, pfn, cuda_version, flags, status);
  if (r != CUDA_SUCCESS || pfn == nullptr || *pfn == nullptr) return r;
  if (status != nullptr && *status != CU_GET_PROC_ADDRESS_SUCCESS) return r;
  *pfn = RedirectProc(symbol, *pfn, cuda_version, flags, enforcing);
  if (*pfn == nullptr) {
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  return r;
}
