#pragma once

// Tables generated from hooks.def: the HookId enum, what each hook is, the
// real functions we forward to and the wrappers we hand out instead.

#include <cstdint>
#include <type_traits>

#include "shim/base/cuda_api.h"

namespace gpuslice::shim {

enum class StreamFlavor : uint8_t { kAnyStream, kLegacyStream, kPerThreadStream };
enum class OlderVersions : uint8_t { kPassOlder, kDenyOlder };
enum class HookLibrary : uint8_t { kCuda, kNvml };

enum HookId : uint16_t {
#define GPUSLICE_CU_HOOK(symbol, proc_name, version, stream, pfn_type, older) kHook_##symbol,
#define GPUSLICE_NVML_HOOK(symbol) kHook_##symbol,
#include "shim/hooks.def"
  kHookCount
};

struct HookInfo {
  const char* symbol;
  const char* proc_name;  // nullptr for NVML hooks.
  int version;
  StreamFlavor stream;
  OlderVersions older;
  HookLibrary library;
};
extern const HookInfo kHooks[kHookCount];

// Our exported wrapper for each hook.
extern void* const kWrappers[kHookCount];

// The real function of each hook, or nullptr when the driver lacks it.
// Written only during initialisation, before the initialisation state is
// published with a release store, and read only after an acquire load of
// that state, so plain (non-atomic) storage is race-free.
extern void* g_real[kHookCount];

template <HookId id>
struct HookTraits;
#define GPUSLICE_CU_HOOK(symbol, proc_name, version, stream, pfn_type, older) \
  template <>                                                                 \
  struct HookTraits<kHook_##symbol> {                                         \
    using Fn = pfn_type;                                                      \
  };
#define GPUSLICE_NVML_HOOK(symbol)            \
  template <>                                 \
  struct HookTraits<kHook_##symbol> {         \
    using Fn = symbol##_fn;                   \
  };
#include "shim/hooks.def"

template <HookId id>
inline typename HookTraits<id>::Fn Real() {
  return reinterpret_cast<typename HookTraits<id>::Fn>(g_real[id]);
}

// Index of the hook for exported symbol `name`, or kHookCount. Cheap
// rejection of names that cannot be hooks (not "cu..."/"nvml...").
HookId FindHookBySymbol(const char* name);

}  // namespace gpuslice::shim

// Declarations of the wrappers, so the tables can take their addresses.
extern "C" {
#define GPUSLICE_CU_HOOK(symbol, proc_name, version, stream, pfn_type, older) \
  std::remove_pointer_t<pfn_type> symbol;
#define GPUSLICE_NVML_HOOK(symbol) std::remove_pointer_t<symbol##_fn> symbol;
#include "shim/hooks.def"
}

// Calls the real driver function of a hook: REAL(cuMemAlloc_v2)(dptr, n).
#define REAL(symbol) ::gpuslice::shim::Real<::gpuslice::shim::kHook_##symbol>()

// Marks a wrapper definition as exported.
#define GPUSLICE_EXPORT extern "C" __attribute__((visibility("default")))
