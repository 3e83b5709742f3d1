// Library lifetime, system queries and finding device handles.

#include <cstdio>
#include <string>
#include <string_view>

#include "sim/nvml/nvml_buffers.h"
#include "sim/nvml/nvml_context.h"
#include "sim/nvml/nvml_pci.h"

namespace gpuslice::sim {
namespace {

// The simulator impersonates the R580 driver branch, the first to ship with
// CUDA 13.0 (docs/SIMULATOR.md, "Simulated NVML").
constexpr std::string_view kDriverVersion = "580.65.06";
constexpr std::string_view kNvmlVersion = "13.580.65.06";
constexpr int kCudaDriverVersion = 13000;

nvmlReturn_t GetCount(unsigned int* count) {
  NvmlContext::ReadAccess access(NvmlContext::Get());
  if (access.status() != NVML_SUCCESS) return access.status();
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = access.model().device_count();
  return NVML_SUCCESS;
}

nvmlReturn_t GetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  NvmlContext::ReadAccess access(NvmlContext::Get());
  if (access.status() != NVML_SUCCESS) return access.status();
  if (device == nullptr || index >= access.model().device_count()) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *device = NvmlContext::Handle({index, -1});
  return NVML_SUCCESS;
}

nvmlReturn_t GetHandleByPciBusId(const char* bus_id, nvmlDevice_t* device) {
  NvmlContext::ReadAccess access(NvmlContext::Get());
  if (access.status() != NVML_SUCCESS) return access.status();
  if (bus_id == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  core::Result<PciAddress> wanted = ParsePciBusId(bus_id);
  if (!wanted.ok()) return NVML_ERROR_INVALID_ARGUMENT;
  DeviceModel& model = access.model();
  for (uint32_t d = 0; d < model.device_count(); ++d) {
    const layout::DeviceRecord& r = model.state()->devices[d];
    if (PciAddress{r.pci_domain, r.pci_bus, r.pci_device, 0} == *wanted) {
      *device = NvmlContext::Handle({d, -1});
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t GetCudaDriverVersion(int* version) {
  // Real NVML answers this without nvmlInit too.
  if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *version = kCudaDriverVersion;
  return NVML_SUCCESS;
}

}  // namespace
}  // namespace gpuslice::sim

using gpuslice::sim::NvmlContext;

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) { return NvmlContext::Get().Init(); }

// The v1 entry point differs from v2 only in how a real driver treats GPUs it
// cannot attach; the simulator attaches to all of them alike.
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlInit(void) { return NvmlContext::Get().Init(); }

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  // NO_GPUS and NO_ATTACH relax what a real driver must find at init; the
  // simulator's GPUs always exist, so both are accepted and change nothing.
  if ((flags & ~static_cast<unsigned int>(NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH)) !=
      0) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return NvmlContext::Get().Init();
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlShutdown(void) { return NvmlContext::Get().Shutdown(); }

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  NvmlContext::ReadAccess access(NvmlContext::Get());
  if (access.status() != NVML_SUCCESS) return access.status();
  return gpuslice::sim::CopyNvmlString(gpuslice::sim::kDriverVersion, version, length);
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  // Like real NVML, answered without nvmlInit.
  return gpuslice::sim::CopyNvmlString(gpuslice::sim::kNvmlVersion, version, length);
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* cudaDriverVersion) {
  return gpuslice::sim::GetCudaDriverVersion(cudaDriverVersion);
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cudaDriverVersion) {
  return gpuslice::sim::GetCudaDriverVersion(cudaDriverVersion);
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
  return gpuslice::sim::GetCount(deviceCount);
}

// v1 counted only GPUs the caller may access; in the simulator that is all.
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* deviceCount) {
  return gpuslice::sim::GetCount(deviceCount);
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                                nvmlDevice_t* device) {
  return gpuslice::sim::GetHandleByIndex(index, device);
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index,
                                                             nvmlDevice_t* device) {
  return gpuslice::sim::GetHandleByIndex(index, device);
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId,
                                                                   nvmlDevice_t* device) {
  return gpuslice::sim::GetHandleByPciBusId(pciBusId, device);
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* pciBusId,
                                                                nvmlDevice_t* device) {
  return gpuslice::sim::GetHandleByPciBusId(pciBusId, device);
}

// GPU UUIDs give the GPU's handle, MIG UUIDs ("MIG-...") the MIG device's, as
// real NVML does since R470.
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid,
                                                            nvmlDevice_t* device) {
  NvmlContext::ReadAccess access(NvmlContext::Get());
  if (access.status() != NVML_SUCCESS) return access.status();
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const std::string_view wanted(uuid);
  gpuslice::sim::DeviceModel& model = access.model();
  for (uint32_t d = 0; d < model.device_count(); ++d) {
    const gpuslice::sim::layout::DeviceRecord& r = model.state()->devices[d];
    if (wanted == r.uuid) {
      *device = NvmlContext::Handle({d, -1});
      return NVML_SUCCESS;
    }
    for (uint32_t m = 0; m < r.mig_count; ++m) {
      if (wanted == model.state()->units[r.mig[m].unit].uuid) {
        *device = NvmlContext::Handle({d, static_cast<int32_t>(m)});
        return NVML_SUCCESS;
      }
    }
  }
  return NVML_ERROR_NOT_FOUND;
}
