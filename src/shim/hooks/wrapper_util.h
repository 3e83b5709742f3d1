#pragma once

// Shared pieces of the wrappers: the prologue every wrapper starts with and
// the charge/uncharge pattern around a driver call.

#include "shim/base/alloc_table.h"
#include "shim/hooks.h"
#include "shim/base/resume_on_demand.h"
#include "shim/shim_state.h"

namespace gpuslice::shim {

// What a wrapper returns when the driver lacks the function it forwards to.
inline constexpr CUresult kMissingInDriver = CUDA_ERROR_NOT_SUPPORTED;

// AllocInfo::kind values.
inline constexpr uint32_t kKindPlain = 0;  // Charged per allocation.
inline constexpr uint32_t kKindPool = 1;   // Part of a tracked pool's charge.

// Charges `bytes` on `dev`, runs `call`; on success records the allocation
// under `key()` in `table`. Rolls the charge back if the driver fails. If
// the table is full the allocation is undone with `undo` and refused.
template <typename Call, typename Key, typename Undo>
CUresult ChargeAround(AllocTable& table, int dev, uint64_t bytes, Call call, Key key, Undo undo) {
  if (!Admit(dev, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = call();
  if (r != CUDA_SUCCESS) {
    Unadmit(dev, bytes);
    return r;
  }
  if (!table.Insert(key(), AllocInfo{bytes, uint32_t(dev), kKindPlain, 0})) {
    undo();
    Unadmit(dev, bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return r;
}

// Gives back the charge of a freed allocation (memory_hooks.cc).
void ReturnCharge(const AllocInfo& info);

// Returns what was charged for `key` after `call` (the driver's free)
// succeeds. The entry is taken out first so that the driver cannot hand the
// same address to another thread's allocation while it is still listed.
// Unknown keys (allocated before the shim enforced anything) are forwarded.
template <typename Call>
CUresult UnchargeAround(AllocTable& table, uint64_t key, Call call) {
  AllocInfo info;
  const bool known = table.Remove(key, &info);
  CUresult r = call();
  if (!known) return r;
  if (r != CUDA_SUCCESS) {
    table.Insert(key, info);  // Still allocated: keep counting it.
    return r;
  }
  ReturnCharge(info);
  return r;
}

}  // namespace gpuslice::shim

// Every wrapper of an entry point that uses the GPU starts with this:
// initialise on first use, ask for a resume if the job is suspended (and
// wait for it: resume_on_demand.h), fetch the real function, and know
// whether to count.
#define GPUSLICE_PROLOGUE(symbol)                       \
  const bool enforcing = ::gpuslice::shim::Enforcing(); \
  if (enforcing) ::gpuslice::shim::ResumeIfSuspended(); \
  const auto real = REAL(symbol);                       \
  if (real == nullptr) return ::gpuslice::shim::kMissingInDriver

// The same for lookups and device properties, which use no GPU and so do
// not resume a suspended job (cuGetProcAddress, cuDeviceTotalMem).
#define GPUSLICE_LOOKUP_PROLOGUE(symbol)                \
  const bool enforcing = ::gpuslice::shim::Enforcing(); \
  const auto real = REAL(symbol);                       \
  if (real == nullptr) return ::gpuslice::shim::kMissingInDriver
