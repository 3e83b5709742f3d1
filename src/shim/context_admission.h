#pragma once

// Contexts admitted before they are created: what the wrappers of
// context_hooks.cc call around the driver's context creation, retain,
// release, reset and destroy, and the driver-memory resync (NVML) that
// module events and destroys use. The arithmetic is in context_charge.h.
//
// A creation goes Reserve → driver call → Settle (or Cancel when the driver
// fails). Reserve charges the expected size before the driver runs:
//   - the slice's learnt size for the device (DeviceEntry::context_bytes);
//   - none learnt yet: this process becomes the device's learner, measures
//     NVML's per-process figure, and holds all the room left under the limit
//     while it creates the context; another creator waits for the learner;
//   - nothing for a primary context that is already charged or active (a
//     retain of an existing context takes no memory).
// It refuses with CUDA_ERROR_OUT_OF_MEMORY, before any creation, when the
// reservation does not fit (after a sweep of dead processes). Settle turns
// the reservation into the context's charge: the learner's measurement, the
// learnt size for a process's first context on the device (not re-measured,
// so that later processes need no NVML), NVML's figure for any other. If the
// context proved larger than reserved and the slice is now over its limit,
// Settle says so and the wrapper undoes the context.
//
// Every charge is recorded per context (ContextLedger), so a destroy or
// release returns exactly what was charged, with or without NVML; a resync
// from NVML follows and corrects the rest (modules, growth).
//
// Thread safety: any thread; the per-process bookkeeping is serialised by a
// spin guard held only on these slow paths, never by an allocation.

#include <cstdint>

#include "shim/base/cuda_api.h"

namespace gpuslice::shim {

// One context creation between its Reserve and its Settle or Cancel.
struct ContextTicket {
  int dev = -1;               // Slice device charged; < 0: not counted.
  bool existing = false;      // A primary context already there: nothing reserved.
  bool learner = false;       // This creation learns the device's context size.
  bool measure = false;       // Settle from NVML's figure.
  uint64_t learner_word = 0;  // LearnerWord, when learner.
  uint64_t reserved = 0;      // Bytes reserved before the creation.
  bool measured_before = false;
  uint64_t driver_before = 0;  // Learner: driver memory before the creation.
};

// Before cuCtxCreate* on device `ordinal`. CUDA_SUCCESS (reserved, or not
// counted) or CUDA_ERROR_OUT_OF_MEMORY (nothing reserved, nothing to create).
CUresult ReserveCreatedContext(CUdevice ordinal, ContextTicket* ticket);
// Before cuDevicePrimaryCtxRetain on `ordinal`: reserves only when the retain
// will create the context.
CUresult ReservePrimaryContext(CUdevice ordinal, ContextTicket* ticket);
// The driver refused the creation: gives the reservation back.
void CancelContext(const ContextTicket& ticket);
// The driver created `ctx` / retained the primary context of `ordinal`:
// charges it. False when it proved larger than reserved and the slice is now
// over its limit: the caller destroys / releases it (and calls
// ReturnCreatedContext / PrimaryContextReleased) and refuses.
bool SettleCreatedContext(const ContextTicket& ticket, CUcontext ctx);
bool SettlePrimaryContext(const ContextTicket& ticket, CUdevice ordinal);

// Around cuCtxDestroy: the record is taken out before the driver call (the
// driver may hand the handle to another creation at once), put back if the
// call fails, and its charge returned if it succeeds.
struct ContextRecord {
  int dev = -1;  // -1: not a context this process charged.
  uint64_t bytes = 0;
};
ContextRecord TakeCreatedContext(CUcontext ctx);
void RestoreCreatedContext(CUcontext ctx, const ContextRecord& record);
void ReturnCreatedContext(const ContextRecord& record);
// After a successful cuDevicePrimaryCtxRelease / cuDevicePrimaryCtxReset.
void PrimaryContextReleased(CUdevice ordinal);
void PrimaryContextReset(CUdevice ordinal);

// Re-learns the driver memory of this process on slice device `dev` from
// NVML (contexts beyond their charge, modules) and charges the difference,
// keeping the reservations NVML cannot show. False when NVML cannot tell.
bool ResyncDriverMemory(int dev);

// An allocation on `dev` that did not fit: if the slice's first context on
// the device is being created (its learner holds the room), waits until it
// is done and returns true (worth one more try); false at once otherwise.
bool WaitForContextLearner(int dev);

// In a forked child: the parent's contexts are not the child's.
void ForgetContexts();

}  // namespace gpuslice::shim
