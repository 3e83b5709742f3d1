// MIG queries. A simulated GPU in MIG mode has a fixed set of MIG devices,
// each one GPU instance with one compute instance (sim/sim_config.h).

#include "sim/nvml/nvml_context.h"

namespace gpuslice::sim {
namespace {

// Real A100, H100 and H200 allow up to 7 MIG devices (an A30 4); the
// simulator reports 7 for every GPU in MIG mode.
constexpr unsigned int kMaxMigDevices = layout::kMaxMigPerDevice;

}  // namespace
}  // namespace gpuslice::sim

using gpuslice::sim::NvmlContext;
using gpuslice::sim::NvmlTarget;
using gpuslice::sim::WithDevice;
using GpuAccess = gpuslice::sim::NvmlContext::ReadAccess;

// NVML_ERROR_NOT_SUPPORTED on GPUs that cannot do MIG and on MIG devices.
// The simulator has no pending mode changes: pending == current.
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device,
                                                       unsigned int* currentMode,
                                                       unsigned int* pendingMode) {
  return WithDevice(device, [&](GpuAccess& access, NvmlTarget target) {
    if (currentMode == nullptr || pendingMode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (target.is_mig() || !access.model().Device(target.device).mig_capable) {
      return NVML_ERROR_NOT_SUPPORTED;
    }
    const bool enabled = access.model().state()->devices[target.device].mig_count > 0;
    *currentMode = enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pendingMode = *currentMode;
    return NVML_SUCCESS;
  });
}

// The number of MIG devices that could exist, not how many do; 0 when MIG is
// not enabled (as real NVML).
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device,
                                                                 unsigned int* count) {
  return WithDevice(device, [&](GpuAccess& access, NvmlTarget target) {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (target.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
    const bool enabled = access.model().state()->devices[target.device].mig_count > 0;
    *count = enabled ? gpuslice::sim::kMaxMigDevices : 0;
    return NVML_SUCCESS;
  });
}

// Indices below the maximum that hold no MIG device are NVML_ERROR_NOT_FOUND,
// so callers probe 0 .. max-1 as they do on real GPUs.
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device,
                                                                      unsigned int index,
                                                                      nvmlDevice_t* migDevice) {
  return WithDevice(device, [&](GpuAccess& access, NvmlTarget target) {
    if (migDevice == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (target.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
    const uint32_t mig_count = access.model().state()->devices[target.device].mig_count;
    if (mig_count == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (index >= gpuslice::sim::kMaxMigDevices) return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= mig_count) return NVML_ERROR_NOT_FOUND;
    *migDevice = NvmlContext::Handle({target.device, static_cast<int32_t>(index)});
    return NVML_SUCCESS;
  });
}

GPUSLICE_NVML_EXPORT nvmlReturn_t
nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t* device) {
  return WithDevice(migDevice, [&](GpuAccess&, NvmlTarget target) {
    if (device == nullptr || !target.is_mig()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = NvmlContext::Handle({target.device, -1});
    return NVML_SUCCESS;
  });
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device,
                                                              unsigned int* isMigDevice) {
  return WithDevice(device, [&](GpuAccess&, NvmlTarget target) {
    if (isMigDevice == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = target.is_mig() ? 1 : 0;
    return NVML_SUCCESS;
  });
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device,
                                                             unsigned int* id) {
  return WithDevice(device, [&](GpuAccess& access, NvmlTarget target) {
    if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!target.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
    *id = access.model().state()->devices[target.device].mig[target.mig].gpu_instance_id;
    return NVML_SUCCESS;
  });
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device,
                                                                 unsigned int* id) {
  return WithDevice(device, [&](GpuAccess& access, NvmlTarget target) {
    if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!target.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
    *id = access.model().state()->devices[target.device].mig[target.mig].compute_instance_id;
    return NVML_SUCCESS;
  });
}
