// Simulated NVML: GPU health — volatile ECC error counts and XID events —
// from the faults injected into the device model (gpuslice-sim-fault,
// docs/SIMULATOR.md "Faults"). Same signatures and return codes as NVIDIA's
// library; only nvmlEventTypeXidCriticalError is supported, and MIG device
// handles answer NVML_ERROR_NOT_SUPPORTED (ECC and XIDs belong to the board).

#include <time.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "core/nvml_abi.h"
#include "sim/nvml/nvml_context.h"
#include "sim/state_layout.h"

using gpuslice::sim::NvmlContext;
using gpuslice::sim::NvmlTarget;
using Access = gpuslice::sim::NvmlContext::ReadAccess;

// An event set: the GPUs registered with it and, per GPU, how many XID
// events of that GPU it has handed out (events before registration are not
// reported, as in NVML).
struct nvmlEventSet_st {
  struct Registration {
    uint32_t device = 0;
    uint64_t seen = 0;
  };
  std::mutex mu;
  std::vector<Registration> registrations;  // Guarded by mu.
};

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device,
                                                              nvmlMemoryErrorType_t errorType,
                                                              nvmlEccCounterType_t counterType,
                                                              unsigned long long* eccCounts) {
  return gpuslice::sim::WithDevice(device, [&](Access& access, NvmlTarget target) {
    if (eccCounts == nullptr || errorType >= NVML_MEMORY_ERROR_TYPE_COUNT ||
        counterType >= NVML_ECC_COUNTER_TYPE_COUNT) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (target.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
    // The simulated GPU has never been reloaded: aggregate == volatile.
    const gpuslice::sim::layout::DeviceHealth& h = access.model().faults().Health(target.device);
    *eccCounts = errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED
                     ? h.ecc_corrected.load(std::memory_order_relaxed)
                     : h.ecc_uncorrected.load(std::memory_order_relaxed);
    return NVML_SUCCESS;
  });
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                                   unsigned long long* eventTypes) {
  return gpuslice::sim::WithDevice(device, [&](Access&, NvmlTarget target) {
    if (eventTypes == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *eventTypes = target.is_mig() ? 0 : nvmlEventTypeXidCriticalError;
    return NVML_SUCCESS;
  });
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  Access access(NvmlContext::Get());
  if (access.status() != NVML_SUCCESS) return access.status();
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *set = new nvmlEventSet_st();
  return NVML_SUCCESS;
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device,
                                                           unsigned long long eventTypes,
                                                           nvmlEventSet_t set) {
  return gpuslice::sim::WithDevice(device, [&](Access& access, NvmlTarget target) {
    if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (target.is_mig() || (eventTypes & ~nvmlEventTypeXidCriticalError) != 0) {
      return NVML_ERROR_NOT_SUPPORTED;
    }
    const uint64_t now =
        access.model().faults().Health(target.device).xid_count.load(std::memory_order_acquire);
    std::lock_guard<std::mutex> lock(set->mu);
    for (const auto& r : set->registrations) {
      if (r.device == target.device) return NVML_SUCCESS;
    }
    set->registrations.push_back({target.device, now});
    return NVML_SUCCESS;
  });
}

// Returns the oldest event not yet handed out, waiting up to `timeoutms`;
// NVML_ERROR_TIMEOUT when none came.
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                                      unsigned int timeoutms) {
  if (set == nullptr || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  timespec start{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  while (true) {
    {
      Access access(NvmlContext::Get());
      if (access.status() != NVML_SUCCESS) return access.status();
      std::lock_guard<std::mutex> lock(set->mu);
      for (auto& r : set->registrations) {
        const gpuslice::sim::layout::DeviceHealth& h = access.model().faults().Health(r.device);
        const uint64_t count = h.xid_count.load(std::memory_order_acquire);
        if (count <= r.seen) continue;
        // Events older than the ring are lost, as a slow reader of NVML's
        // own event queue loses them.
        r.seen =
            std::max(r.seen, count - std::min<uint64_t>(count, gpuslice::sim::layout::kXidRing));
        *data = nvmlEventData_t{};
        data->device = NvmlContext::Handle(NvmlTarget{r.device, -1});
        data->eventType = nvmlEventTypeXidCriticalError;
        data->eventData =
            h.xid_codes[r.seen % gpuslice::sim::layout::kXidRing].load(std::memory_order_relaxed);
        data->gpuInstanceId = 0xFFFFFFFFu;
        data->computeInstanceId = 0xFFFFFFFFu;
        ++r.seen;
        return NVML_SUCCESS;
      }
    }
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    const long long waited_ms =
        (now.tv_sec - start.tv_sec) * 1000LL + (now.tv_nsec - start.tv_nsec) / 1000000;
    if (waited_ms >= timeoutms) return NVML_ERROR_TIMEOUT;
    timespec nap{0, 1'000'000};
    nanosleep(&nap, nullptr);
  }
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  Access access(NvmlContext::Get());
  if (access.status() != NVML_SUCCESS) return access.status();
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  delete set;
  return NVML_SUCCESS;
}
