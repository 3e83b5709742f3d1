#include "shim/hooks.h"

#include <cstring>

// Taking the address of a wrapper whose prototype cuda.h marks deprecated is
// not a use of the deprecated API.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace gpuslice::shim {

const HookInfo kHooks[kHookCount] = {
#define GPUSLICE_CU_HOOK(symbol, proc_name, version, stream, pfn_type, older) \
  {#symbol, #proc_name, version, StreamFlavor::stream, OlderVersions::older, HookLibrary::kCuda},
#define GPUSLICE_NVML_HOOK(symbol) \
  {#symbol, nullptr, 0, StreamFlavor::kAnyStream, OlderVersions::kPassOlder, HookLibrary::kNvml},
#include "shim/hooks.def"
};

void* const kWrappers[kHookCount] = {
#define GPUSLICE_CU_HOOK(symbol, proc_name, version, stream, pfn_type, older) \
  reinterpret_cast<void*>(&::symbol),
#define GPUSLICE_NVML_HOOK(symbol) reinterpret_cast<void*>(&::symbol),
#include "shim/hooks.def"
};

void* g_real[kHookCount] = {};

HookId FindHookBySymbol(const char* name) {
  if (name == nullptr || name[0] != 'c' || name[1] != 'u') {
    if (name == nullptr || std::strncmp(name, "nvml", 4) != 0) return kHookCount;
  }
  for (int i = 0; i < kHookCount; ++i) {
    if (std::strcmp(kHooks[i].symbol, name) == 0) return HookId(i);
  }
  return kHookCount;
}

}  // namespace gpuslice::shim
