// GPU Performance Monitoring (GPM). Real NVML has it on Hopper and newer
// (compute capability 9+), and it is the only utilisation NVML gives for the
// instances of a GPU in MIG mode (nvmlDeviceGetUtilizationRates and the
// per-process samples are NOT_SUPPORTED there). The simulator models the two
// figures it can derive from its ground truth, the busy time of each unit:
//   GRAPHICS_UTIL, SM_UTIL: percent of the interval between the two samples
//     during which the unit ran kernels. On a whole GPU in MIG mode, the
//     instances' busy time weighted by their SMs (the simulator does not keep
//     the union of the instances' active intervals).
// Every other metric (SM occupancy, tensor pipes, bandwidths) is
// NVML_ERROR_NOT_SUPPORTED in its nvmlReturn.

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <new>

#include "sim/nvml/nvml_context.h"

// A sample: what it was taken of and the unit(s)' cumulative busy time then.
struct nvmlGpmSample_st {
  uint32_t magic = 0;
  bool filled = false;
  uint32_t device = 0;
  int64_t gpu_instance = -1;  // -1: the whole GPU.
  uint64_t time_ns = 0;       // CLOCK_MONOTONIC.
  double busy_ns = 0;         // SM-weighted over instances on a GPU in MIG mode.
};

namespace gpuslice::sim {
namespace {

using Access = NvmlContext::ReadAccess;

constexpr uint32_t kSampleMagic = 0x47504d53;  // "GPMS"

bool GpmSupported(DeviceModel& model, NvmlTarget target) {
  return !target.is_mig() && model.Device(target.device).cc_major >= 9;
}

uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

bool ValidSample(const nvmlGpmSample_st* s) { return s != nullptr && s->magic == kSampleMagic; }

// The busy time of the whole GPU: its unit, or its instances weighted by SMs.
double DeviceBusyNs(DeviceModel& model, uint32_t device) {
  const DeviceInfo info = model.Device(device);
  if (info.unit != layout::kNoUnit) return double(model.UnitBusyNs(info.unit));
  double busy = 0;
  uint32_t sms = 0;
  for (const MigInfo& m : info.mig) sms += m.sm_count;
  for (const MigInfo& m : info.mig) {
    if (sms > 0) busy += double(model.UnitBusyNs(m.unit)) * m.sm_count / sms;
  }
  return busy;
}

struct MetricText {
  char* short_name;
  char* long_name;
  char* unit;
};

// NVML hands out pointers to its own constant strings.
MetricText TextOf(unsigned int id) {
  static char gract[] = "GRACT", gract_long[] = "graphics engine activity", sm[] = "SMACT",
              sm_long[] = "SM activity", pct[] = "%";
  switch (id) {
    case NVML_GPM_METRIC_GRAPHICS_UTIL:
      return {gract, gract_long, pct};
    case NVML_GPM_METRIC_SM_UTIL:
      return {sm, sm_long, pct};
    default:
      return {nullptr, nullptr, nullptr};
  }
}

}  // namespace
}  // namespace gpuslice::sim

using gpuslice::sim::NvmlTarget;
using gpuslice::sim::WithDevice;

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device,
                                                            nvmlGpmSupport_t* gpmSupport) {
  return WithDevice(device, [&](gpuslice::sim::Access& access, NvmlTarget target) {
    if (gpmSupport == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION) {
      return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    gpmSupport->isSupportedDevice = gpuslice::sim::GpmSupported(access.model(), target) ? 1 : 0;
    return NVML_SUCCESS;
  });
}

// Samples live in the caller's process only (they are not in shared state).
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t* gpmSample) {
  if (gpmSample == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  auto* s = new (std::nothrow) nvmlGpmSample_st;
  if (s == nullptr) return NVML_ERROR_MEMORY;
  s->magic = gpuslice::sim::kSampleMagic;
  *gpmSample = s;
  return NVML_SUCCESS;
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample) {
  if (!gpuslice::sim::ValidSample(gpmSample)) return NVML_ERROR_INVALID_ARGUMENT;
  gpmSample->magic = 0;
  delete gpmSample;
  return NVML_SUCCESS;
}

GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample) {
  return WithDevice(device, [&](gpuslice::sim::Access& access, NvmlTarget target) {
    if (!gpuslice::sim::ValidSample(gpmSample)) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpuslice::sim::GpmSupported(access.model(), target)) return NVML_ERROR_NOT_SUPPORTED;
    gpmSample->device = target.device;
    gpmSample->gpu_instance = -1;
    gpmSample->time_ns = gpuslice::sim::MonotonicNs();
    gpmSample->busy_ns = gpuslice::sim::DeviceBusyNs(access.model(), target.device);
    gpmSample->filled = true;
    return NVML_SUCCESS;
  });
}

// `device` is the GPU (not a MIG device handle), in MIG mode; the instance is
// named by its GPU-instance id. NVML_ERROR_NOT_FOUND for an id it does not have.
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device,
                                                      unsigned int gpuInstanceId,
                                                      nvmlGpmSample_t gpmSample) {
  return WithDevice(device, [&](gpuslice::sim::Access& access, NvmlTarget target) {
    if (!gpuslice::sim::ValidSample(gpmSample)) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpuslice::sim::GpmSupported(access.model(), target)) return NVML_ERROR_NOT_SUPPORTED;
    const gpuslice::sim::DeviceInfo info = access.model().Device(target.device);
    if (info.mig.empty()) return NVML_ERROR_NOT_SUPPORTED;
    bool found = false;
    uint64_t busy = 0;
    for (const gpuslice::sim::MigInfo& m : info.mig) {
      if (m.gpu_instance_id != gpuInstanceId) continue;
      found = true;
      busy += access.model().UnitBusyNs(m.unit);
    }
    if (!found) return NVML_ERROR_NOT_FOUND;
    gpmSample->device = target.device;
    gpmSample->gpu_instance = gpuInstanceId;
    gpmSample->time_ns = gpuslice::sim::MonotonicNs();
    gpmSample->busy_ns = double(busy);
    gpmSample->filled = true;
    return NVML_SUCCESS;
  });
}

// Both samples must be taken of the same GPU or instance, sample2 after
// sample1; otherwise NVML_ERROR_INVALID_ARGUMENT. Each metric's own
// nvmlReturn says whether its value is valid.
GPUSLICE_NVML_EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t* metricsGet) {
  gpuslice::sim::NvmlContext::ReadAccess access(gpuslice::sim::NvmlContext::Get());
  if (access.status() != NVML_SUCCESS) return access.status();
  if (metricsGet == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  const nvmlGpmSample_st* a = metricsGet->sample1;
  const nvmlGpmSample_st* b = metricsGet->sample2;
  if (metricsGet->numMetrics > NVML_GPM_METRIC_MAX || !gpuslice::sim::ValidSample(a) ||
      !gpuslice::sim::ValidSample(b) || !a->filled || !b->filled || a->device != b->device ||
      a->gpu_instance != b->gpu_instance || b->time_ns <= a->time_ns) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const double interval = double(b->time_ns - a->time_ns);
  const double busy = std::clamp(100.0 * (b->busy_ns - a->busy_ns) / interval, 0.0, 100.0);
  for (unsigned int i = 0; i < metricsGet->numMetrics; ++i) {
    nvmlGpmMetric_t& m = metricsGet->metrics[i];
    const gpuslice::sim::MetricText text = gpuslice::sim::TextOf(m.metricId);
    m.metricInfo.shortName = text.short_name;
    m.metricInfo.longName = text.long_name;
    m.metricInfo.unit = text.unit;
    if (m.metricId == NVML_GPM_METRIC_GRAPHICS_UTIL || m.metricId == NVML_GPM_METRIC_SM_UTIL) {
      m.nvmlReturn = NVML_SUCCESS;
      m.value = busy;
    } else {
      m.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
      m.value = 0;
    }
  }
  return NVML_SUCCESS;
}
