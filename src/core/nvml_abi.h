#pragma once

// The subset of the NVIDIA Management Library ABI that gpuslice uses, declared
// here because nvml.h is not installed on build machines. Everything below is
// binary-compatible with NVIDIA's libnvidia-ml.so.1 (NVML API version 12):
// enum values, struct layouts and the exported symbol names of each version of
// an entry point. The sizes and offsets we rely on are pinned by static_asserts
// at the end of the file, so a wrong declaration fails the build instead of
// corrupting memory at run time.
//
// Three users:
//   - the simulated libnvidia-ml.so.1 (src/sim/nvml*.cc) defines the functions;
//   - the daemon dlopens the real (or simulated) library and resolves them
//     through the *_fn pointer typedefs generated from GPUSLICE_NVML_FUNCTIONS;
//   - the shim may interpose some of them.
// The list of entry points exists once, in GPUSLICE_NVML_FUNCTIONS, so that
// prototypes, pointer types and dlsym tables cannot drift apart.
//
// Unversioned names: NVIDIA's header #defines e.g. nvmlInit to nvmlInit_v2.
// We do not, because the simulator must define the legacy symbols separately
// (old binaries call them). Callers name the version they mean.

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------
// Return codes.

typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_DEPRECATED = 26,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_GPU_NOT_FOUND = 28,
  NVML_ERROR_INVALID_STATE = 29,
  NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

// ---------------------------------------------------------------------------
// Constants.

// Fields that have no value (e.g. usedGpuMemory of a process whose memory is
// unknown) hold this, converted to the field's type: all bits set.
#define NVML_VALUE_NOT_AVAILABLE (-1)

// Buffer sizes guaranteed to be large enough for the string queries.
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_SERIAL_BUFFER_SIZE 30
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80

// printf formats of nvmlPciInfo_t::busIdLegacy and ::busId (domain, bus, device).
#define NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT "%04X:%02X:%02X.0"
#define NVML_DEVICE_PCI_BUS_ID_FMT "%08X:%02X:%02X.0"

// Versioned structs carry sizeof(struct) | version << 24 in their first field.
#define NVML_STRUCT_VERSION(data, ver) \
  (unsigned int)(sizeof(nvml##data##_v##ver##_t) | ((ver) << 24U))

// nvmlInitWithFlags flags.
#define NVML_INIT_FLAG_NO_GPUS 1
#define NVML_INIT_FLAG_NO_ATTACH 2

// MIG modes reported by nvmlDeviceGetMigMode.
#define NVML_DEVICE_MIG_DISABLE 0x0
#define NVML_DEVICE_MIG_ENABLE 0x1

// ---------------------------------------------------------------------------
// Types.

// An opaque device handle: a physical GPU or a MIG device.
typedef struct nvmlDevice_st* nvmlDevice_t;

typedef struct nvmlPciInfo_st {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;     // Device id << 16 | vendor id.
  unsigned int pciSubSystemId;  // Subsystem device id << 16 | subsystem vendor id.
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

// Percent of the last sample period (1/6 s to 1 s, per product) during which
// a kernel ran (gpu) or device memory was read or written (memory).
typedef struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;

// v1: used includes memory reserved by the driver; total = free + used.
typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

// v2 reports the driver/firmware reservation separately; used includes it.
// The caller must set version = nvmlMemory_v2.
typedef struct nvmlMemory_v2_st {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;

#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2)

// Layout of nvmlDeviceGetComputeRunningProcesses (the unversioned, v1 symbol).
typedef struct nvmlProcessInfo_v1_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

// Layout of nvmlDeviceGetComputeRunningProcesses_v2 and _v3. The instance ids
// are 0xFFFFFFFF for processes that do not run on a MIG device.
typedef struct nvmlProcessInfo_v2_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t, nvmlProcessInfo_t;

// One per-process utilisation sample. timeStamp is CPU time in microseconds
// since the epoch; the utilisations are percentages over the sample period.
typedef struct nvmlProcessUtilizationSample_st {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

typedef enum nvmlTemperatureSensors_enum {
  NVML_TEMPERATURE_GPU = 0,
  NVML_TEMPERATURE_COUNT
} nvmlTemperatureSensors_t;

// nvmlDeviceGetTotalEccErrors.
typedef enum nvmlMemoryErrorType_enum {
  NVML_MEMORY_ERROR_TYPE_CORRECTED = 0,    // Single-bit, corrected.
  NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1,  // Double-bit, not corrected.
  NVML_MEMORY_ERROR_TYPE_COUNT
} nvmlMemoryErrorType_t;

typedef enum nvmlEccCounterType_enum {
  NVML_VOLATILE_ECC = 0,   // Since the last driver load.
  NVML_AGGREGATE_ECC = 1,  // Over the GPU's life.
  NVML_ECC_COUNTER_TYPE_COUNT
} nvmlEccCounterType_t;

// Events (nvmlEventSetCreate, nvmlDeviceRegisterEvents, nvmlEventSetWait_v2).
typedef struct nvmlEventSet_st* nvmlEventSet_t;
#define nvmlEventTypeXidCriticalError 0x0000000000000008LL

typedef struct nvmlEventData_st {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // The XID code, for nvmlEventTypeXidCriticalError.
  unsigned int gpuInstanceId;    // 0xFFFFFFFF when not a MIG device's event.
  unsigned int computeInstanceId;
} nvmlEventData_t;

// GPU Performance Monitoring (GPM, NVML 12, Hopper and newer): the caller
// takes two samples of a GPU (nvmlGpmSampleGet) or of one GPU instance of a
// GPU in MIG mode (nvmlGpmMigSampleGet) and asks for metrics over the time
// between them. The only utilisation NVML gives for MIG instances.
typedef struct nvmlGpmSample_st* nvmlGpmSample_t;

typedef enum {
  NVML_GPM_METRIC_GRAPHICS_UTIL = 1,  // % of time any compute/graphics work was active.
  NVML_GPM_METRIC_SM_UTIL = 2,        // % of SMs busy.
  NVML_GPM_METRIC_SM_OCCUPANCY = 3,   // % of warps active vs the theoretical maximum.
} nvmlGpmMetricId_t;

// The length of nvmlGpmMetricsGet_t.metrics: 98 in the first NVML 12 headers,
// 210 in later ones (both with NVML_GPM_METRICS_GET_VERSION 1). A library
// reads only numMetrics entries, so both layouts work with either library.
#define NVML_GPM_METRIC_MAX 210

typedef struct {
  unsigned int metricId;    // IN.
  nvmlReturn_t nvmlReturn;  // OUT: value is valid only when NVML_SUCCESS.
  double value;             // OUT.
  struct {
    char* shortName;
    char* longName;
    char* unit;
  } metricInfo;  // OUT: may be null.
} nvmlGpmMetric_t;

typedef struct {
  unsigned int version;     // IN: NVML_GPM_METRICS_GET_VERSION.
  unsigned int numMetrics;  // IN: entries of metrics[] to fill.
  nvmlGpmSample_t sample1;  // IN: the older sample.
  nvmlGpmSample_t sample2;  // IN: the newer sample.
  nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;

#define NVML_GPM_METRICS_GET_VERSION 1

typedef struct {
  unsigned int version;            // IN: NVML_GPM_SUPPORT_VERSION.
  unsigned int isSupportedDevice;  // OUT.
} nvmlGpmSupport_t;

#define NVML_GPM_SUPPORT_VERSION 1

typedef enum nvmlEnableState_enum {
  NVML_FEATURE_DISABLED = 0,
  NVML_FEATURE_ENABLED = 1
} nvmlEnableState_t;

// ---------------------------------------------------------------------------
// Entry points. X(name, parameter list) for every function returning
// nvmlReturn_t, in the exact exported spelling (with version suffix).

// clang-format off
#define GPUSLICE_NVML_FUNCTIONS(X)                                                           \
  X(nvmlInit, (void))                                                                        \
  X(nvmlInit_v2, (void))                                                                     \
  X(nvmlInitWithFlags, (unsigned int flags))                                                 \
  X(nvmlShutdown, (void))                                                                    \
  X(nvmlSystemGetDriverVersion, (char* version, unsigned int length))                        \
  X(nvmlSystemGetNVMLVersion, (char* version, unsigned int length))                          \
  X(nvmlSystemGetCudaDriverVersion, (int* cudaDriverVersion))                                \
  X(nvmlSystemGetCudaDriverVersion_v2, (int* cudaDriverVersion))                             \
  X(nvmlDeviceGetCount, (unsigned int* deviceCount))                                         \
  X(nvmlDeviceGetCount_v2, (unsigned int* deviceCount))                                      \
  X(nvmlDeviceGetHandleByIndex, (unsigned int index, nvmlDevice_t* device))                  \
  X(nvmlDeviceGetHandleByIndex_v2, (unsigned int index, nvmlDevice_t* device))               \
  X(nvmlDeviceGetHandleByUUID, (const char* uuid, nvmlDevice_t* device))                     \
  X(nvmlDeviceGetHandleByPciBusId, (const char* pciBusId, nvmlDevice_t* device))             \
  X(nvmlDeviceGetHandleByPciBusId_v2, (const char* pciBusId, nvmlDevice_t* device))          \
  X(nvmlDeviceGetName, (nvmlDevice_t device, char* name, unsigned int length))               \
  X(nvmlDeviceGetUUID, (nvmlDevice_t device, char* uuid, unsigned int length))               \
  X(nvmlDeviceGetIndex, (nvmlDevice_t device, unsigned int* index))                          \
  X(nvmlDeviceGetMinorNumber, (nvmlDevice_t device, unsigned int* minorNumber))              \
  X(nvmlDeviceGetPciInfo_v3, (nvmlDevice_t device, nvmlPciInfo_t* pci))                      \
  X(nvmlDeviceGetMemoryInfo, (nvmlDevice_t device, nvmlMemory_t* memory))                    \
  X(nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t device, nvmlMemory_v2_t* memory))              \
  X(nvmlDeviceGetUtilizationRates, (nvmlDevice_t device, nvmlUtilization_t* utilization))    \
  X(nvmlDeviceGetComputeRunningProcesses,                                                    \
    (nvmlDevice_t device, unsigned int* infoCount, nvmlProcessInfo_v1_t* infos))             \
  X(nvmlDeviceGetComputeRunningProcesses_v2,                                                 \
    (nvmlDevice_t device, unsigned int* infoCount, nvmlProcessInfo_v2_t* infos))             \
  X(nvmlDeviceGetComputeRunningProcesses_v3,                                                 \
    (nvmlDevice_t device, unsigned int* infoCount, nvmlProcessInfo_t* infos))                \
  X(nvmlDeviceGetProcessUtilization,                                                         \
    (nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,                       \
     unsigned int* processSamplesCount, unsigned long long lastSeenTimeStamp))               \
  X(nvmlDeviceGetTemperature,                                                                \
    (nvmlDevice_t device, nvmlTemperatureSensors_t sensorType, unsigned int* temp))          \
  X(nvmlDeviceGetPowerUsage, (nvmlDevice_t device, unsigned int* power))                     \
  X(nvmlDeviceGetTotalEccErrors,                                                             \
    (nvmlDevice_t device, nvmlMemoryErrorType_t errorType, nvmlEccCounterType_t counterType, \
     unsigned long long* eccCounts))                                                         \
  X(nvmlDeviceGetSupportedEventTypes, (nvmlDevice_t device, unsigned long long* eventTypes)) \
  X(nvmlDeviceRegisterEvents,                                                                \
    (nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set))                \
  X(nvmlEventSetCreate, (nvmlEventSet_t* set))                                               \
  X(nvmlEventSetWait_v2, (nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms)) \
  X(nvmlEventSetFree, (nvmlEventSet_t set))                                                  \
  X(nvmlDeviceGetMigMode,                                                                    \
    (nvmlDevice_t device, unsigned int* currentMode, unsigned int* pendingMode))             \
  X(nvmlDeviceGetMaxMigDeviceCount, (nvmlDevice_t device, unsigned int* count))              \
  X(nvmlDeviceGetMigDeviceHandleByIndex,                                                     \
    (nvmlDevice_t device, unsigned int index, nvmlDevice_t* migDevice))                      \
  X(nvmlDeviceGetDeviceHandleFromMigDeviceHandle,                                            \
    (nvmlDevice_t migDevice, nvmlDevice_t* device))                                          \
  X(nvmlDeviceIsMigDeviceHandle, (nvmlDevice_t device, unsigned int* isMigDevice))           \
  X(nvmlDeviceGetGpuInstanceId, (nvmlDevice_t device, unsigned int* id))                     \
  X(nvmlDeviceGetComputeInstanceId, (nvmlDevice_t device, unsigned int* id))                 \
  X(nvmlGpmQueryDeviceSupport, (nvmlDevice_t device, nvmlGpmSupport_t* gpmSupport))          \
  X(nvmlGpmSampleAlloc, (nvmlGpmSample_t* gpmSample))                                        \
  X(nvmlGpmSampleFree, (nvmlGpmSample_t gpmSample))                                          \
  X(nvmlGpmSampleGet, (nvmlDevice_t device, nvmlGpmSample_t gpmSample))                      \
  X(nvmlGpmMigSampleGet,                                                                     \
    (nvmlDevice_t device, unsigned int gpuInstanceId, nvmlGpmSample_t gpmSample))            \
  X(nvmlGpmMetricsGet, (nvmlGpmMetricsGet_t* metricsGet))
// clang-format on

#define GPUSLICE_NVML_DECLARE_PROTOTYPE_(name, params) nvmlReturn_t name params;
#define GPUSLICE_NVML_DECLARE_POINTER_(name, params) typedef nvmlReturn_t(*name##_fn) params;
GPUSLICE_NVML_FUNCTIONS(GPUSLICE_NVML_DECLARE_PROTOTYPE_)
GPUSLICE_NVML_FUNCTIONS(GPUSLICE_NVML_DECLARE_POINTER_)
#undef GPUSLICE_NVML_DECLARE_PROTOTYPE_
#undef GPUSLICE_NVML_DECLARE_POINTER_

// The one entry point that does not return nvmlReturn_t: a static, never-null
// description of a return code.
const char* nvmlErrorString(nvmlReturn_t result);
typedef const char* (*nvmlErrorString_fn)(nvmlReturn_t result);

#ifdef __cplusplus
}  // extern "C"

#include <cstddef>

// Layout facts of NVML API version 12 on LP64 (x86-64 and aarch64 Linux).
static_assert(sizeof(nvmlReturn_t) == 4);
static_assert(sizeof(nvmlTemperatureSensors_t) == 4);
static_assert(sizeof(nvmlPciInfo_t) == 68);
static_assert(offsetof(nvmlPciInfo_t, domain) == 16);
static_assert(offsetof(nvmlPciInfo_t, pciDeviceId) == 28);
static_assert(offsetof(nvmlPciInfo_t, pciSubSystemId) == 32);
static_assert(offsetof(nvmlPciInfo_t, busId) == 36);
static_assert(sizeof(nvmlUtilization_t) == 8);
static_assert(sizeof(nvmlMemory_t) == 24);
static_assert(sizeof(nvmlMemory_v2_t) == 40);
static_assert(offsetof(nvmlMemory_v2_t, total) == 8);
static_assert(offsetof(nvmlMemory_v2_t, reserved) == 16);
static_assert(offsetof(nvmlMemory_v2_t, free) == 24);
static_assert(offsetof(nvmlMemory_v2_t, used) == 32);
static_assert(nvmlMemory_v2 == (40u | (2u << 24)));
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16);
static_assert(offsetof(nvmlProcessInfo_v1_t, usedGpuMemory) == 8);
static_assert(sizeof(nvmlProcessInfo_t) == 24);
static_assert(offsetof(nvmlProcessInfo_t, usedGpuMemory) == 8);
static_assert(offsetof(nvmlProcessInfo_t, gpuInstanceId) == 16);
static_assert(offsetof(nvmlProcessInfo_t, computeInstanceId) == 20);
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32);
static_assert(offsetof(nvmlProcessUtilizationSample_t, timeStamp) == 8);
static_assert(offsetof(nvmlProcessUtilizationSample_t, smUtil) == 16);
static_assert(offsetof(nvmlProcessUtilizationSample_t, decUtil) == 28);
static_assert(sizeof(nvmlMemoryErrorType_t) == 4);
static_assert(sizeof(nvmlEccCounterType_t) == 4);
static_assert(sizeof(nvmlEventData_t) == 32);
static_assert(offsetof(nvmlEventData_t, eventData) == 16);
static_assert(offsetof(nvmlEventData_t, gpuInstanceId) == 24);
static_assert(sizeof(nvmlGpmMetric_t) == 40);
static_assert(offsetof(nvmlGpmMetric_t, value) == 8);
static_assert(offsetof(nvmlGpmMetric_t, metricInfo) == 16);
static_assert(offsetof(nvmlGpmMetricsGet_t, sample1) == 8);
static_assert(offsetof(nvmlGpmMetricsGet_t, metrics) == 24);
static_assert(sizeof(nvmlGpmSupport_t) == 8);
#endif  // __cplusplus
