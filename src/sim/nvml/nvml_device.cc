// Device queries: identity, memory, utilisation, processes, sensors.

#include <cstdio>
#include <string>
#include <vector>

#include "sim/nvml/nvml_buffers.h"
#include "sim/nvml/nvml_context.h"
#include "sim/nvml/nvml_pci.h"

namespace gpuslice::sim {
namespace {

using Access = NvmlContext::ReadAccess;

constexpr unsigned int kNotMigInstanceId = 0xFFFFFFFFu;

MemoryInfo TargetMemory(DeviceModel& model, NvmlTarget target) {
  return target.is_mig() ? model.UnitMemory(UnitOf(model, target))
                         : model.DeviceMemory(target.device);
}

// One row of a running-process list, in the widest (v2/v3) layout. On a
// whole GPU in MIG mode a process gets one row per MIG device it uses, with
// that instance's ids, as real NVML reports it.
std::vector<nvmlProcessInfo_t> RunningProcesses(DeviceModel& model, NvmlTarget target) {
  std::vector<nvmlProcessInfo_t> rows;
  const layout::DeviceRecord& record = model.state()->devices[target.device];
  if (record.mig_count == 0) {
    for (const ProcessUsage& p : model.DeviceProcesses(target.device)) {
      rows.push_back(
          {static_cast<unsigned int>(p.pid), p.used_bytes, kNotMigInstanceId, kNotMigInstanceId});
    }
    return rows;
  }
  for (uint32_t m = 0; m < record.mig_count; ++m) {
    if (target.is_mig() && static_cast<uint32_t>(target.mig) != m) continue;
    const layout::MigRecord& mig = record.mig[m];
    for (const ProcessUsage& p : model.UnitProcesses(mig.unit)) {
      rows.push_back({static_cast<unsigned int>(p.pid), p.used_bytes, mig.gpu_instance_id,
                      mig.compute_instance_id});
    }
  }
  return rows;
}

template <typename Row>
nvmlReturn_t GetRunningProcesses(nvmlDevice_t device, unsigned int* count, Row* infos,
                                 Row (*convert)(const nvmlProcessInfo_t&)) {
  return WithDevice(device, [&](Access& access, NvmlTarget target) {
    std::vector<Row> rows;
    for (const nvmlProcessInfo_t& p : RunningProcesses(access.model(), target)) {
      rows.push_back(convert(p));
    }
    return CopyNvmlArray(rows, count, infos);
  });
}

nvmlProcessInfo_v1_t ToV1(const nvmlProcessInfo_t& p) { return {p.pid, p.usedGpuMemory}; }
nvmlProcessInfo_t Same(const nvmlProcessInfo_t& p) { return p; }

}  // namespace
}  // namespace gpuslice::sim

using gpuslice::sim::Access;
using gpuslice::sim::NvmlTarget;
using gpuslice::sim::UnitOf;
using gpuslice::sim::WithDevice;

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                                    unsigned int length) {
  return WithDevice(device, [&](Access& access, NvmlTarget target) {
    const gpuslice::sim::layout::DeviceRecord& r = access.model().state()->devices[target.device];
    std::string value = r.name;
    // Real MIG devices are named after their parent and profile.
    if (target.is_mig()) value += std::string(" MIG ") + r.mig[target.mig].profile;
    return gpuslice::sim::CopyNvmlString(value, name, length);
  });
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                                    unsigned int length) {
  return WithDevice(device, [&](Access& access, NvmlTarget target) {
    gpuslice::sim::DeviceModel& model = access.model();
    const char* value = target.is_mig() ? model.state()->units[UnitOf(model, target)].uuid
                                        : model.state()->devices[target.device].uuid;
    return gpuslice::sim::CopyNvmlString(value, uuid, length);
  });
}

// MIG devices have no index of their own in the simulator (docs/SIMULATOR.md, "Simulated NVML").
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  return WithDevice(device, [&](Access&, NvmlTarget target) {
    if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (target.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
    *index = target.device;
    return NVML_SUCCESS;
  });
}

// The minor number of the GPU's device node (/dev/nvidiaN). The simulator's
// GPUs are numbered like the driver numbers a machine's: in index order.
// Schedulers (Slurm's gres.conf File=) name GPUs by these nodes. MIG
// devices have no node of their own (their capabilities do): not supported,
// as with NVIDIA's library.
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device,
                                                           unsigned int* minor) {
  return WithDevice(device, [&](Access&, NvmlTarget target) {
    if (minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (target.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
    *minor = target.device;
    return NVML_SUCCESS;
  });
}

// A MIG device reports its parent's PCI identity.
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return WithDevice(device, [&](Access& access, NvmlTarget target) {
    if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const gpuslice::sim::layout::DeviceRecord& r = access.model().state()->devices[target.device];
    nvmlPciInfo_t info = {};
    std::snprintf(info.busIdLegacy, sizeof(info.busIdLegacy), NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
                  r.pci_domain, r.pci_bus, r.pci_device);
    std::snprintf(info.busId, sizeof(info.busId), NVML_DEVICE_PCI_BUS_ID_FMT, r.pci_domain,
                  r.pci_bus, r.pci_device);
    info.domain = r.pci_domain;
    info.bus = r.pci_bus;
    info.device = r.pci_device;
    info.pciDeviceId = gpuslice::sim::PciDeviceIdForName(r.name);
    // Boards of NVIDIA's own make carry the same ids as subsystem.
    info.pciSubSystemId = info.pciDeviceId;
    *pci = info;
    return NVML_SUCCESS;
  });
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device,
                                                          nvmlMemory_t* memory) {
  return WithDevice(device, [&](Access& access, NvmlTarget target) {
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    gpuslice::sim::MemoryInfo m = gpuslice::sim::TargetMemory(access.model(), target);
    *memory = {m.total, m.free, m.used};
    return NVML_SUCCESS;
  });
}

// The simulated driver reserves nothing for itself: reserved is 0 and used is
// what processes hold (allocations plus context overhead).
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                             nvmlMemory_v2_t* memory) {
  return WithDevice(device, [&](Access& access, NvmlTarget target) {
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    gpuslice::sim::MemoryInfo m = gpuslice::sim::TargetMemory(access.model(), target);
    memory->total = m.total;
    memory->reserved = 0;
    memory->free = m.free;
    memory->used = m.used;
    return NVML_SUCCESS;
  });
}

// Like real NVML, not supported on MIG devices nor on a GPU in MIG mode.
// memory (memory-controller busy time) is not simulated and reads 0.
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                                nvmlUtilization_t* utilization) {
  return WithDevice(device, [&](Access& access, NvmlTarget target) {
    if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    uint32_t unit = UnitOf(access.model(), target);
    if (target.is_mig() || unit == gpuslice::sim::layout::kNoUnit) {
      return NVML_ERROR_NOT_SUPPORTED;
    }
    *utilization = {access.model().meter().UnitUtilizationPercent(unit), 0};
    return NVML_SUCCESS;
  });
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t device, unsigned int* infoCount, nvmlProcessInfo_t* infos) {
  return gpuslice::sim::GetRunningProcesses(device, infoCount, infos, gpuslice::sim::Same);
}

// v2 has the same layout as v3 (v3 only changed how MIG rows are counted).
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(
    nvmlDevice_t device, unsigned int* infoCount, nvmlProcessInfo_v2_t* infos) {
  return gpuslice::sim::GetRunningProcesses(device, infoCount, infos, gpuslice::sim::Same);
}

// The unversioned symbol, used by binaries built against old headers, fills
// the v1 layout (pid, usedGpuMemory).
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(
    nvmlDevice_t device, unsigned int* infoCount, nvmlProcessInfo_v1_t* infos) {
  return gpuslice::sim::GetRunningProcesses(device, infoCount, infos, gpuslice::sim::ToV1);
}

// One sample per process that used the GPU since lastSeenTimeStamp: its share
// of the GPU's time between its last sample at or before lastSeenTimeStamp
// (or its oldest kept sample) and its newest one, stamped with the newest
// sample's time. NVML_ERROR_NOT_FOUND when there is none. A NULL buffer asks
// for the count (NVML_ERROR_INSUFFICIENT_SIZE), as callers of real NVML do.
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
    unsigned int* processSamplesCount, unsigned long long lastSeenTimeStamp) {
  return WithDevice(device, [&](Access& access, NvmlTarget target) {
    if (processSamplesCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    uint32_t unit = UnitOf(access.model(), target);
    if (target.is_mig() || unit == gpuslice::sim::layout::kNoUnit) {
      return NVML_ERROR_NOT_SUPPORTED;
    }
    std::vector<nvmlProcessUtilizationSample_t> rows;
    for (const gpuslice::sim::ProcessUtilization& p :
         access.model().ProcessUtilizationSince(unit, lastSeenTimeStamp)) {
      rows.push_back({static_cast<unsigned int>(p.pid), p.timestamp_us, p.sm_percent, 0, 0, 0});
    }
    if (rows.empty()) return NVML_ERROR_NOT_FOUND;
    if (utilization == nullptr) {
      *processSamplesCount = static_cast<unsigned int>(rows.size());
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    return gpuslice::sim::CopyNvmlArray(rows, processSamplesCount, utilization);
  });
}

// Sensors belong to the physical board: not supported on MIG devices.
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                                           nvmlTemperatureSensors_t sensorType,
                                                           unsigned int* temp) {
  return WithDevice(device, [&](Access& access, NvmlTarget target) {
    if (temp == nullptr || sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    if (target.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
    *temp = access.model().meter().TemperatureC(target.device);
    return NVML_SUCCESS;
  });
}

// Milliwatts.
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device,
                                                          unsigned int* power) {
  return WithDevice(device, [&](Access& access, NvmlTarget target) {
    if (power == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (target.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
    *power = access.model().meter().PowerMilliwatts(target.device);
    return NVML_SUCCESS;
  });
}
