// Initialisation, version and device queries.

#include <cstring>

#include "sim/driver/driver.h"

using namespace gpuslice::sim::driver;  // NOLINT: entry points are extern "C".

namespace {

int SharedPerSm(const Device& d) {
  switch (d.gpu.cc_major * 10 + d.gpu.cc_minor) {
    case 90:
      return 228 * 1024;
    case 80:
      return 164 * 1024;
    case 86:
    case 89:
      return 100 * 1024;
    case 75:
      return 64 * 1024;
    default:
      return 96 * 1024;
  }
}

int MaxThreadsPerSm(const Device& d) {
  int cc = d.gpu.cc_major * 10 + d.gpu.cc_minor;
  return (cc == 86 || cc == 89) ? 1536 : (cc == 75 ? 1024 : 2048);
}

bool Attribute(const Device& d, CUdevice_attribute attr, int* out) {
  const int cc = d.gpu.cc_major * 10 + d.gpu.cc_minor;
  switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *out = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
      *out = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      *out = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      *out = 64;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      *out = 2147483647;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
      *out = 65535;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      *out = 65535;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      *out = 48 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
      *out = 64 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *out = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
      *out = 2147483647;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
      *out = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      *out = static_cast<int>(d.gpu.clock_khz);
      break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
      *out = 512;
      break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
      *out = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
      *out = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *out = static_cast<int>(d.info.sm_count);
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
      *out = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
      *out = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
      *out = cc >= 80 && cc != 86 && cc != 89 ? 1 : 0;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      *out = static_cast<int>(d.gpu.pci_bus);
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
      *out = static_cast<int>(d.gpu.pci_device);
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
      *out = static_cast<int>(d.gpu.pci_domain);
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      *out = static_cast<int>(d.gpu.memory_clock_khz);
      break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      *out = static_cast<int>(d.gpu.memory_bus_width);
      break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      *out = static_cast<int>(d.gpu.l2_cache_bytes);
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *out = MaxThreadsPerSm(d);
      break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
      *out = 2;
      break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
      *out = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *out = static_cast<int>(d.gpu.cc_major);
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *out = static_cast<int>(d.gpu.cc_minor);
      break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
      *out = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
      *out = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
      *out = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      *out = SharedPerSm(d);
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *out = SharedPerSm(d) - 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
      *out = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
      *out = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
      *out = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
      *out = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      *out = cc == 86 ? 16 : (cc == 89 ? 24 : (cc == 75 ? 16 : 32));
      break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *out = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
      *out = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      *out = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
      *out = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
      *out = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
      *out = cc >= 90 ? 1 : 0;
      break;
    default:
      if (attr < 0 || attr >= CU_DEVICE_ATTRIBUTE_MAX) return false;
      *out = 0;  // A capability the simulator does not model: reported absent.
  }
  return true;
}

}  // namespace

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return Driver::Get().Init();
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* d = nullptr;
  if (CUresult r = LookupDevice(ordinal, &d); r != CUDA_SUCCESS) return r;
  *device = ordinal;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDeviceGetCount(int* count) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(Driver::Get().devices.size());
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  Device* d = nullptr;
  if (CUresult r = LookupDevice(dev, &d); r != CUDA_SUCCESS) return r;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::string n = d->gpu.name;
  if (d->info.mig_index >= 0) n += " MIG " + d->gpu.mig[d->info.mig_index].profile;
  std::strncpy(name, n.c_str(), static_cast<size_t>(len));
  name[len - 1] = '\0';
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  Device* d = nullptr;
  if (CUresult r = LookupDevice(dev, &d); r != CUDA_SUCCESS) return r;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  UuidBytes(d->info.uuid, uuid);  // The MIG instance's own UUID on MIG devices.
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  Device* d = nullptr;
  if (CUresult r = LookupDevice(dev, &d); r != CUDA_SUCCESS) return r;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  UuidBytes(d->gpu.uuid, uuid);  // The legacy call reports the parent GPU.
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  Device* d = nullptr;
  if (CUresult r = LookupDevice(dev, &d); r != CUDA_SUCCESS) return r;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *bytes = d->info.memory_bytes;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  size_t b = 0;
  CUresult r = cuDeviceTotalMem_v2(&b, dev);
  if (r == CUDA_SUCCESS && bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) *bytes = b > 0xffffffffu ? 0xffffffffu : static_cast<unsigned>(b);
  return r;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib,
                                                         CUdevice dev) {
  Device* d = nullptr;
  if (CUresult r = LookupDevice(dev, &d); r != CUDA_SUCCESS) return r;
  if (pi == nullptr || !Attribute(*d, attrib, pi)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDeviceComputeCapability(int* major, int* minor,
                                                              CUdevice dev) {
  Device* d = nullptr;
  if (CUresult r = LookupDevice(dev, &d); r != CUDA_SUCCESS) return r;
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *major = static_cast<int>(d->gpu.cc_major);
  *minor = static_cast<int>(d->gpu.cc_minor);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  Device* d = nullptr;
  if (CUresult r = LookupDevice(dev, &d); r != CUDA_SUCCESS) return r;
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::string id = d->gpu.PciBusIdCuda();
  std::strncpy(pciBusId, id.c_str(), static_cast<size_t>(len));
  pciBusId[len - 1] = '\0';
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (dev == nullptr || pciBusId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned domain = 0, bus = 0, device = 0;
  if (std::sscanf(pciBusId, "%x:%x:%x", &domain, &bus, &device) != 3) {
    domain = 0;
    if (std::sscanf(pciBusId, "%x:%x", &bus, &device) != 2) return CUDA_ERROR_INVALID_VALUE;
  }
  for (const auto& d : Driver::Get().devices) {
    if (d->gpu.pci_domain == domain && d->gpu.pci_bus == bus && d->gpu.pci_device == device) {
      *dev = d->ordinal;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}
