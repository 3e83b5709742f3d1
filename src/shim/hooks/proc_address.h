#pragma once

// The cuGetProcAddress dispatch: which of our wrappers stands for the
// function the driver resolved. CUDA 12 and 13 runtimes reach every driver
// entry point through cuGetProcAddress, so this is the main road in.

#include <cstdint>

#include "shim/hooks.h"

namespace gpuslice::shim {

struct ProcMatch {
  HookId hook = kHookCount;  // kHookCount: not one of ours.
  bool deny = false;         // Asked for an older version we refuse to hand out.
};

// The hook that `name` at `cuda_version` with `flags`
// (CU_GET_PROC_ADDRESS_*) resolves to, following the table in hooks.def:
// among the hooks named `name` whose stream flavour fits the flags, the one
// with the highest version not above `cuda_version`.
ProcMatch MatchProc(const char* name, int cuda_version, uint64_t flags);

// What to hand back to a cuGetProcAddress caller for which the driver
// resolved `name` to `found`. First by identity (the driver gave us the
// very function we interpose), then by name and version for versions this
// build's cuda.h knows. `enforcing` turns denials on.
void* RedirectProc(const char* name, void* found, int cuda_version, uint64_t flags,
                   bool enforcing);

}  // namespace gpuslice::shim
