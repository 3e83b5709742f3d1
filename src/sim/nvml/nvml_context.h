#pragma once

// The state of the simulated libnvidia-ml.so.1 inside one process: whether
// NVML is initialised (reference-counted, as in real NVML), the attached
// device model, and the device handles given to callers.
//
// Handles. An nvmlDevice_t is a pointer into a static table with one entry
// per (GPU, MIG slot) the state layout can describe, so handles never dangle:
// they stay valid across nvmlShutdown/nvmlInit, and a handle of a GPU that a
// later state file does not have is rejected by ResolveHandle. Anything not
// pointing at a table entry is NVML_ERROR_INVALID_ARGUMENT.
//
// Threads. NVML is thread-safe. Every entry point holds a shared lock on the
// context for its whole duration (ReadAccess), so nvmlShutdown (exclusive
// lock) cannot unmap the model under a concurrent read. The model itself is
// safe to use from many threads.

#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "core/nvml_abi.h"
#include "sim/device_model.h"

namespace gpuslice::sim {

// What a device handle stands for.
struct NvmlTarget {
  uint32_t device = 0;  // Physical GPU index.
  int32_t mig = -1;     // MIG device index on that GPU; -1: the whole GPU.
  bool is_mig() const { return mig >= 0; }
};

class NvmlContext {
 public:
  // The process-wide context of the library.
  static NvmlContext& Get();

  // nvmlInit*: the first call opens the device model from the environment
  // (GPUSLICE_SIM_STATE, GPUSLICE_SIM_GPUS, GPUSLICE_SIM_CONFIG, ...); later
  // calls only count. On failure nothing is counted.
  nvmlReturn_t Init();
  // nvmlShutdown: the last call detaches. NVML_ERROR_UNINITIALIZED when not
  // initialised.
  nvmlReturn_t Shutdown();

  // A shared hold on the context for the duration of one entry point.
  class ReadAccess {
   public:
    explicit ReadAccess(NvmlContext& context) : context_(context), lock_(context.mutex_) {}
    // NVML_SUCCESS when initialised, else NVML_ERROR_UNINITIALIZED.
    nvmlReturn_t status() const {
      return context_.model_ ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    }
    DeviceModel& model() const { return *context_.model_; }

   private:
    NvmlContext& context_;
    std::shared_lock<std::shared_mutex> lock_;
  };

  // The handle of a whole GPU or of one of its MIG devices. Does not check
  // that the GPU or MIG device exists.
  static nvmlDevice_t Handle(NvmlTarget target);
  // What `handle` stands for, or NVML_ERROR_INVALID_ARGUMENT if it is null,
  // not one of ours, or names a GPU / MIG device the model does not have.
  static nvmlReturn_t ResolveHandle(DeviceModel& model, nvmlDevice_t handle, NvmlTarget* target);

  // The message of the last failed Init, for diagnostics and tests.
  std::string last_init_error() const;

 private:
  NvmlContext() = default;

  mutable std::shared_mutex mutex_;
  int ref_count_ = 0;                   // Guarded by mutex_.
  std::unique_ptr<DeviceModel> model_;  // Guarded by mutex_; set iff ref_count_ > 0.
  std::string last_init_error_;         // Guarded by mutex_.
};

// Runs `body(model, target)` for the device `handle` stands for, after the
// checks every device query makes first, in NVML's order: initialised, then
// a valid handle. `body` returns the nvmlReturn_t of the call.
template <typename Body>
nvmlReturn_t WithDevice(nvmlDevice_t handle, Body&& body) {
  NvmlContext::ReadAccess access(NvmlContext::Get());
  if (access.status() != NVML_SUCCESS) return access.status();
  NvmlTarget target;
  nvmlReturn_t r = NvmlContext::ResolveHandle(access.model(), handle, &target);
  if (r != NVML_SUCCESS) return r;
  return body(access, target);
}

// The model unit (sim/device_model.h) a target's memory and busy time live
// in: the MIG device's instance, or the whole GPU's unit; layout::kNoUnit for
// a GPU in MIG mode (its memory and time are spread over its instances).
uint32_t UnitOf(DeviceModel& model, NvmlTarget target);

}  // namespace gpuslice::sim

// Marks a definition as one of the library's exported NVML entry points. The
// library is built with -fvisibility=hidden and a version script; both must
// let the symbol through.
#define GPUSLICE_NVML_EXPORT extern "C" __attribute__((visibility("default")))
