#include "daemon/node/nvml_inventory.h"

#include <dlfcn.h>
#include <link.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <optional>

#include "core/nvml_abi.h"
#include "daemon/node/child_probe.h"

namespace gpuslice::daemon {
namespace {

// Optional topology calls, not in nvml_abi.h's list (our simulator does not
// provide them); declared from NVML's documented ABI.
typedef nvmlReturn_t (*TopologyCommonAncestorFn)(nvmlDevice_t, nvmlDevice_t, int*);
typedef nvmlReturn_t (*NvLinkStateFn)(nvmlDevice_t, unsigned int, nvmlEnableState_t*);
constexpr int kTopologyMultiple = 20;  // NVML_TOPOLOGY_MULTIPLE: behind PCIe switches.

}  // namespace

// The entry points the inventory needs, resolved once per Read(). Outside
// the anonymous namespace: NvmlInventory's GPM helpers take it.
struct Nvml {
  nvmlInit_v2_fn init = nullptr;
  nvmlSystemGetDriverVersion_fn driver_version = nullptr;
  nvmlSystemGetNVMLVersion_fn nvml_version = nullptr;
  nvmlSystemGetCudaDriverVersion_fn cuda_version = nullptr;
  nvmlDeviceGetCount_v2_fn count = nullptr;
  nvmlDeviceGetHandleByIndex_v2_fn by_index = nullptr;
  nvmlDeviceGetName_fn name = nullptr;
  nvmlDeviceGetUUID_fn uuid = nullptr;
  nvmlDeviceGetPciInfo_v3_fn pci = nullptr;
  nvmlDeviceGetMinorNumber_fn minor = nullptr;
  nvmlDeviceGetMemoryInfo_fn memory = nullptr;
  nvmlDeviceGetUtilizationRates_fn utilization = nullptr;
  nvmlDeviceGetComputeRunningProcesses_v3_fn processes = nullptr;
  nvmlDeviceGetProcessUtilization_fn process_util = nullptr;
  nvmlDeviceGetTemperature_fn temperature = nullptr;
  nvmlDeviceGetPowerUsage_fn power = nullptr;
  nvmlDeviceGetTotalEccErrors_fn ecc = nullptr;
  nvmlDeviceGetSupportedEventTypes_fn event_types = nullptr;
  nvmlEventSetCreate_fn event_set_create = nullptr;
  nvmlDeviceRegisterEvents_fn register_events = nullptr;
  nvmlEventSetWait_v2_fn event_wait = nullptr;
  nvmlDeviceGetMigMode_fn mig_mode = nullptr;
  nvmlDeviceGetMaxMigDeviceCount_fn mig_count = nullptr;
  nvmlDeviceGetMigDeviceHandleByIndex_fn mig_by_index = nullptr;
  nvmlDeviceGetGpuInstanceId_fn gi_id = nullptr;
  nvmlDeviceGetComputeInstanceId_fn ci_id = nullptr;
  nvmlGpmQueryDeviceSupport_fn gpm_support = nullptr;
  nvmlGpmSampleAlloc_fn gpm_alloc = nullptr;
  nvmlGpmSampleFree_fn gpm_free = nullptr;
  nvmlGpmSampleGet_fn gpm_sample = nullptr;
  nvmlGpmMigSampleGet_fn gpm_mig_sample = nullptr;
  nvmlGpmMetricsGet_fn gpm_metrics = nullptr;
  nvmlErrorString_fn error_string = nullptr;
  TopologyCommonAncestorFn common_ancestor = nullptr;
  NvLinkStateFn nvlink_state = nullptr;

  template <typename T>
  void Get(void* h, T* fn, const char* name) {
    *fn = reinterpret_cast<T>(dlsym(h, name));
  }
  void Resolve(void* h) {
    Get(h, &init, "nvmlInit_v2");
    Get(h, &driver_version, "nvmlSystemGetDriverVersion");
    Get(h, &nvml_version, "nvmlSystemGetNVMLVersion");
    Get(h, &cuda_version, "nvmlSystemGetCudaDriverVersion");
    Get(h, &count, "nvmlDeviceGetCount_v2");
    Get(h, &by_index, "nvmlDeviceGetHandleByIndex_v2");
    Get(h, &name, "nvmlDeviceGetName");
    Get(h, &uuid, "nvmlDeviceGetUUID");
    Get(h, &pci, "nvmlDeviceGetPciInfo_v3");
    Get(h, &minor, "nvmlDeviceGetMinorNumber");
    Get(h, &memory, "nvmlDeviceGetMemoryInfo");
    Get(h, &utilization, "nvmlDeviceGetUtilizationRates");
    Get(h, &processes, "nvmlDeviceGetComputeRunningProcesses_v3");
    Get(h, &process_util, "nvmlDeviceGetProcessUtilization");
    Get(h, &temperature, "nvmlDeviceGetTemperature");
    Get(h, &power, "nvmlDeviceGetPowerUsage");
    Get(h, &ecc, "nvmlDeviceGetTotalEccErrors");
    Get(h, &event_types, "nvmlDeviceGetSupportedEventTypes");
    Get(h, &event_set_create, "nvmlEventSetCreate");
    Get(h, &register_events, "nvmlDeviceRegisterEvents");
    Get(h, &event_wait, "nvmlEventSetWait_v2");
    Get(h, &mig_mode, "nvmlDeviceGetMigMode");
    Get(h, &mig_count, "nvmlDeviceGetMaxMigDeviceCount");
    Get(h, &mig_by_index, "nvmlDeviceGetMigDeviceHandleByIndex");
    Get(h, &gi_id, "nvmlDeviceGetGpuInstanceId");
    Get(h, &ci_id, "nvmlDeviceGetComputeInstanceId");
    Get(h, &gpm_support, "nvmlGpmQueryDeviceSupport");
    Get(h, &gpm_alloc, "nvmlGpmSampleAlloc");
    Get(h, &gpm_free, "nvmlGpmSampleFree");
    Get(h, &gpm_sample, "nvmlGpmSampleGet");
    Get(h, &gpm_mig_sample, "nvmlGpmMigSampleGet");
    Get(h, &gpm_metrics, "nvmlGpmMetricsGet");
    Get(h, &error_string, "nvmlErrorString");
    Get(h, &common_ancestor, "nvmlDeviceGetTopologyCommonAncestor");
    Get(h, &nvlink_state, "nvmlDeviceGetNvLinkState");
  }
  bool Complete() const {
    return init && driver_version && count && by_index && name && uuid && memory;
  }
  bool HasGpm() const {
    return gpm_support && gpm_alloc && gpm_free && gpm_sample && gpm_mig_sample && gpm_metrics;
  }
};

namespace {

// Whether NVML measures `d` with GPM (Hopper and newer).
bool GpmSupported(const Nvml& n, nvmlDevice_t d) {
  if (!n.HasGpm()) return false;
  nvmlGpmSupport_t support{NVML_GPM_SUPPORT_VERSION, 0};
  return n.gpm_support(d, &support) == NVML_SUCCESS && support.isSupportedDevice != 0;
}

// Every nvmlReturn_t becomes a Status here.
core::Status NvmlError(const Nvml& n, nvmlReturn_t rc, const std::string& what) {
  std::string msg = what + ": " + (n.error_string ? n.error_string(rc) : "NVML error") +
                    " (nvmlReturn_t " + std::to_string(static_cast<int>(rc)) + ")";
  switch (rc) {
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return core::UnimplementedError(msg);
    case NVML_ERROR_NO_PERMISSION:
      return core::PermissionDeniedError(msg);
    case NVML_ERROR_NOT_FOUND:
    case NVML_ERROR_GPU_NOT_FOUND:
    case NVML_ERROR_LIBRARY_NOT_FOUND:
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return core::NotFoundError(msg);
    case NVML_ERROR_INVALID_ARGUMENT:
      return core::InvalidArgumentError(msg);
    case NVML_ERROR_GPU_IS_LOST:
    case NVML_ERROR_TIMEOUT:
      return core::UnavailableError(msg);
    default:
      return core::InternalError(msg);
  }
}

std::string LoadedPath(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name &&
      map->l_name[0]) {
    return map->l_name;
  }
  return fallback;
}

// "NVIDIA A100-SXM4-40GB MIG 1g.5gb" -> "1g.5gb".
std::string ProfileFromName(const std::string& name) {
  size_t p = name.rfind("MIG ");
  return p == std::string::npos ? std::string() : name.substr(p + 4);
}

// SM counts by GPU UUID, from the CUDA driver (NVML does not report them),
// in a child process so loading the driver cannot hurt the daemon. Best
// effort: on any failure the counts stay unknown (0).
void FillSmCounts(const std::string& cuda_library, std::vector<GpuInfo>* gpus) {
  ProbeResult r = RunInChild({}, [&]() -> ProbeResult {
    unsetenv("CUDA_VISIBLE_DEVICES");
    void* h = dlopen(cuda_library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return {false, dlerror()};
    using InitFn = int (*)(unsigned);
    using CountFn = int (*)(int*);
    using GetFn = int (*)(int*, int);
    using UuidFn = int (*)(unsigned char*, int);
    using AttrFn = int (*)(int*, int, int);
    auto init = reinterpret_cast<InitFn>(dlsym(h, "cuInit"));
    auto count = reinterpret_cast<CountFn>(dlsym(h, "cuDeviceGetCount"));
    auto get = reinterpret_cast<GetFn>(dlsym(h, "cuDeviceGet"));
    auto uuid = reinterpret_cast<UuidFn>(dlsym(h, "cuDeviceGetUuid"));
    auto attr = reinterpret_cast<AttrFn>(dlsym(h, "cuDeviceGetAttribute"));
    if (!init || !count || !get || !uuid || !attr || init(0) != 0) return {false, "cuInit"};
    int n = 0;
    count(&n);
    std::string out;
    for (int i = 0; i < n; ++i) {
      int dev = 0;
      unsigned char u[16];
      int sms = 0;
      // 16 = CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT.
      if (get(&dev, i) != 0 || uuid(u, dev) != 0 || attr(&sms, 16, dev) != 0) continue;
      char text[64];
      std::snprintf(text, sizeof text,
                    "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                    u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
                    u[13], u[14], u[15]);
      out += std::string(text) + " " + std::to_string(sms) + "\n";
    }
    return {true, out};
  });
  if (!r.ok) return;
  size_t start = 0;
  while (start < r.text.size()) {
    size_t nl = r.text.find('\n', start);
    if (nl == std::string::npos) nl = r.text.size();
    std::string line = r.text.substr(start, nl - start);
    size_t sp = line.find(' ');
    if (sp != std::string::npos) {
      for (GpuInfo& g : *gpus) {
        // In MIG mode CUDA enumerates the instances, not the GPU.
        if (!g.mig_enabled && strcasecmp(g.uuid.c_str(), line.substr(0, sp).c_str()) == 0) {
          g.sm_count = static_cast<uint32_t>(std::atoi(line.c_str() + sp + 1));
        }
      }
    }
    start = nl + 1;
  }
}

// The compute processes on GPU `d` (v3 rows: pid, memory, and on a GPU in
// MIG mode the GPU and compute instance ids of the MIG device each runs in).
// On a GPU in MIG mode NVML lists every instance's processes on the GPU only
// to a privileged caller; otherwise (an unprivileged daemon) they are read
// from each MIG device, whose own ids stand in where a row lacks them.
void ReadProcesses(const Nvml& n, nvmlDevice_t d, bool mig, GpuUsage* u) {
  auto read = [&](nvmlDevice_t dev, uint32_t gi, uint32_t ci) {
    nvmlProcessInfo_t infos[64];
    unsigned cnt = 64;
    if (n.processes(dev, &cnt, infos) != NVML_SUCCESS) return false;
    for (unsigned k = 0; k < cnt && k < 64; ++k) {
      GpuProcess p{infos[k].pid, infos[k].usedGpuMemory, 0};
      p.gpu_instance_id = infos[k].gpuInstanceId;
      p.compute_instance_id = infos[k].computeInstanceId;
      if (p.gpu_instance_id == kNoMigInstance) {
        p.gpu_instance_id = gi;
        p.compute_instance_id = ci;
      }
      u->processes.push_back(p);
    }
    return true;
  };
  if (read(d, kNoMigInstance, kNoMigInstance) || !mig || !n.mig_count || !n.mig_by_index) return;
  unsigned max = 0;
  if (n.mig_count(d, &max) != NVML_SUCCESS) return;
  for (unsigned m = 0; m < max; ++m) {
    nvmlDevice_t md = nullptr;
    unsigned gi = kNoMigInstance, ci = kNoMigInstance;
    if (n.mig_by_index(d, m, &md) != NVML_SUCCESS) continue;
    if (!n.gi_id || n.gi_id(md, &gi) != NVML_SUCCESS) gi = kNoMigInstance;
    if (!n.ci_id || n.ci_id(md, &ci) != NVML_SUCCESS) ci = kNoMigInstance;
    read(md, gi, ci);
  }
}

}  // namespace

core::Result<GpuSourceMode> ParseGpuSourceMode(std::string_view text) {
  if (text == "auto") return GpuSourceMode::kAuto;
  if (text == "nvml") return GpuSourceMode::kNvml;
  if (text == "simulated") return GpuSourceMode::kSimulated;
  return core::InvalidArgumentError("gpu source '" + std::string(text) +
                                    "': expected auto, nvml or simulated");
}

NvmlInventory::~NvmlInventory() {
  // The library stays loaded: NVML keeps threads and state, and unloading it
  // at exit gains nothing.
}

core::Result<std::string> NvmlInventory::DriverLibrary(const std::string& name) const {
  if (driver_root_.empty() || driver_root_ == "/") return name;
  // Where distributions and NVIDIA's installer put the driver's libraries.
  static constexpr const char* kLibDirs[] = {
      "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
      "/lib/x86_64-linux-gnu",     "/lib/aarch64-linux-gnu",     "/lib64",     "/lib"};
  std::string looked;
  for (const char* dir : kLibDirs) {
    const std::string path = driver_root_ + dir + "/" + name;
    if (access(path.c_str(), F_OK) == 0) return path;
    looked += (looked.empty() ? "" : ", ") + driver_root_ + dir;
  }
  return core::NotFoundError("no " + name + " under driver_root " + driver_root_ + " (looked in " +
                             looked + ")");
}

core::Result<InventorySnapshot> NvmlInventory::Read() {
  std::string sim = sim_lib_dir_ + "/libnvidia-ml.so.1";
  if (mode_ == GpuSourceMode::kSimulated) return ReadFrom(sim, true);
  auto nvml = DriverLibrary("libnvidia-ml.so.1");
  auto real = nvml.ok() ? ReadFrom(*nvml, false) : core::Result<InventorySnapshot>(nvml.status());
  if (real.ok() || mode_ == GpuSourceMode::kNvml) return real;
  auto simulated = ReadFrom(sim, true);
  if (!simulated.ok()) {
    return core::NotFoundError("no NVML (" + real.status().message() + ") and no simulated GPU (" +
                               simulated.status().message() + ")");
  }
  return simulated;
}

core::Result<InventorySnapshot> NvmlInventory::ReadFrom(const std::string& library,
                                                        bool simulated) {
  void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return core::NotFoundError(std::string("cannot load ") + dlerror());
  InventorySnapshot snap;
  snap.library = LoadedPath(h, library);
  // The system search may find our simulator (e.g. through LD_LIBRARY_PATH).
  bool is_sim = simulated || (!sim_lib_dir_.empty() && snap.library.rfind(sim_lib_dir_, 0) == 0);
  snap.source = is_sim ? "simulated" : "nvml";
  if (!is_sim && driver_root_.size() > 1 && snap.library.rfind(driver_root_ + "/", 0) == 0) {
    snap.host_library = snap.library.substr(driver_root_.size());
  }
  Nvml n;
  n.Resolve(h);
  mig_enabled_.clear();
  gpm_supported_.clear();
  mig_gpu_instances_.clear();
  ForgetGpmSamples(n);
  if (!n.Complete()) {
    return core::NotFoundError(snap.library + " lacks NVML entry points the daemon needs");
  }
  nvmlReturn_t rc = n.init();
  if (rc != NVML_SUCCESS) return NvmlError(n, rc, "nvmlInit_v2 (" + snap.library + ")");
  char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  if (n.driver_version(buf, sizeof buf) == NVML_SUCCESS) snap.driver_version = buf;
  if (n.nvml_version && n.nvml_version(buf, sizeof buf) == NVML_SUCCESS) snap.nvml_version = buf;
  if (n.cuda_version) n.cuda_version(&snap.cuda_driver_version);
  unsigned count = 0;
  rc = n.count(&count);
  if (rc != NVML_SUCCESS) return NvmlError(n, rc, "nvmlDeviceGetCount_v2");
  if (count == 0) return core::NotFoundError(snap.library + " sees no GPU");
  std::vector<nvmlDevice_t> handles;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t d = nullptr;
    rc = n.by_index(i, &d);
    if (rc != NVML_SUCCESS) return NvmlError(n, rc, "GPU " + std::to_string(i));
    GpuInfo g;
    g.index = i;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if ((rc = n.name(d, name, sizeof name)) != NVML_SUCCESS) return NvmlError(n, rc, "GetName");
    if ((rc = n.uuid(d, uuid, sizeof uuid)) != NVML_SUCCESS) return NvmlError(n, rc, "GetUUID");
    g.model = name;
    g.uuid = uuid;
    nvmlMemory_t mem{};
    if ((rc = n.memory(d, &mem)) != NVML_SUCCESS) return NvmlError(n, rc, "GetMemoryInfo");
    g.memory_total = mem.total;
    nvmlPciInfo_t pci{};
    if (n.pci && n.pci(d, &pci) == NVML_SUCCESS) g.pci_bus_id = pci.busId;
    if (unsigned m = 0; n.minor && n.minor(d, &m) == NVML_SUCCESS) g.minor = static_cast<int>(m);
    unsigned current = 0, pending = 0;
    std::vector<uint32_t> gis;  // Its GPU instances, each once.
    if (n.mig_mode && n.mig_mode(d, &current, &pending) == NVML_SUCCESS &&
        current == NVML_DEVICE_MIG_ENABLE && n.mig_count && n.mig_by_index) {
      g.mig_enabled = true;
      unsigned max = 0;
      n.mig_count(d, &max);
      for (unsigned m = 0; m < max; ++m) {
        nvmlDevice_t md = nullptr;
        if (n.mig_by_index(d, m, &md) != NVML_SUCCESS) continue;
        MigInstance mi;
        char mname[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
        char muuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
        n.name(md, mname, sizeof mname);
        n.uuid(md, muuid, sizeof muuid);
        mi.uuid = muuid;
        mi.profile = ProfileFromName(mname);
        nvmlMemory_t mm{};
        if (n.memory(md, &mm) == NVML_SUCCESS) mi.memory_total = mm.total;
        if (n.gi_id) n.gi_id(md, &mi.gpu_instance_id);
        if (n.ci_id) n.ci_id(md, &mi.compute_instance_id);
        g.mig.push_back(mi);
        gis.push_back(mi.gpu_instance_id);
      }
    }
    mig_gpu_instances_.push_back(gis);
    mig_enabled_.push_back(g.mig_enabled);
    gpm_supported_.push_back(GpmSupported(n, d));
    snap.gpus.push_back(g);
    handles.push_back(d);
  }
  // Islands: union of PCIe-switch peers; NVLink GPUs form one island.
  std::vector<int> parent(count);
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  bool known = false;
  std::vector<bool> nvlink(count, false);
  if (n.nvlink_state) {
    for (unsigned i = 0; i < count; ++i) {
      nvmlEnableState_t on = NVML_FEATURE_DISABLED;
      nvlink[i] = n.nvlink_state(handles[i], 0, &on) == NVML_SUCCESS && on == NVML_FEATURE_ENABLED;
      known = known || nvlink[i];
    }
  }
  if (n.common_ancestor) {
    for (unsigned i = 0; i < count; ++i) {
      for (unsigned j = i + 1; j < count; ++j) {
        int level = 0;
        if (n.common_ancestor(handles[i], handles[j], &level) != NVML_SUCCESS) continue;
        known = true;
        if (level <= kTopologyMultiple || (nvlink[i] && nvlink[j])) parent[find(j)] = find(i);
      }
    }
  }
  if (known) {
    for (unsigned i = 0; i < count; ++i) {
      snap.gpus[i].island = find(static_cast<int>(i));
      snap.gpus[i].link = nvlink[i] ? "nvlink" : "pcie";
    }
  }
  // The CUDA driver beside the NVML that was found (under the driver root).
  std::string cuda = "libcuda.so.1";
  if (is_sim) {
    cuda = sim_lib_dir_ + "/libcuda.so.1";
  } else if (!snap.host_library.empty()) {
    cuda = snap.library.substr(0, snap.library.rfind('/')) + "/libcuda.so.1";
  }
  FillSmCounts(cuda, &snap.gpus);
  handle_ = h;
  gpu_count_ = count;
  return snap;
}

// Registers every GPU that supports XID events with one event set, once.
// A driver without events (or a GPU without XID support) leaves those GPUs
// unwatched: their XID figures are then reported as unknown, not as 0.
void NvmlInventory::WatchXids() {
  xid_watched_.resize(gpu_count_, false);
  xid_errors_.resize(gpu_count_, 0);
  last_xid_.resize(gpu_count_, 0);
  last_critical_xid_.resize(gpu_count_, 0);
  if (xid_events_ != nullptr || handle_ == nullptr) return;
  Nvml n;
  n.Resolve(handle_);
  if (!n.event_set_create || !n.register_events || !n.event_wait || !n.event_types) return;
  if (n.event_set_create(&xid_events_) != NVML_SUCCESS) {
    xid_events_ = nullptr;
    return;
  }
  for (unsigned i = 0; i < gpu_count_; ++i) {
    nvmlDevice_t d = nullptr;
    unsigned long long types = 0;
    if (n.by_index(i, &d) == NVML_SUCCESS && n.event_types(d, &types) == NVML_SUCCESS &&
        (types & nvmlEventTypeXidCriticalError) != 0 &&
        n.register_events(d, nvmlEventTypeXidCriticalError, xid_events_) == NVML_SUCCESS) {
      xid_watched_[i] = true;
    }
  }
}

std::optional<double> NvmlInventory::GpmUtil(const Nvml& n, nvmlDevice_t d, uint32_t gpu,
                                             uint32_t gpu_instance) {
  GpmSeries& series = gpm_samples_[{gpu, gpu_instance}];
  // Usage() has several callers (the sampler each second, `gpus` requests):
  // a call soon after the last sample gets that sample's figure instead of
  // one over a sliver of time, and leaves the sampler's interval whole.
  const auto now_time = std::chrono::steady_clock::now();
  if (series.sample != nullptr && now_time - series.taken < kGpmMinInterval) return series.pct;
  nvmlGpmSample_t now = nullptr;
  if (n.gpm_alloc(&now) != NVML_SUCCESS) return std::nullopt;
  const nvmlReturn_t rc = gpu_instance == kNoMigInstance ? n.gpm_sample(d, now)
                                                         : n.gpm_mig_sample(d, gpu_instance, now);
  if (rc != NVML_SUCCESS) {
    n.gpm_free(now);
    return std::nullopt;
  }
  // The figure is over the time since the previous sample; the first one
  // only starts the interval.
  series.pct.reset();
  if (series.sample != nullptr) {
    nvmlGpmMetricsGet_t get{};
    get.version = NVML_GPM_METRICS_GET_VERSION;
    get.numMetrics = 1;
    get.sample1 = series.sample;
    get.sample2 = now;
    get.metrics[0].metricId = NVML_GPM_METRIC_GRAPHICS_UTIL;
    if (n.gpm_metrics(&get) == NVML_SUCCESS && get.metrics[0].nvmlReturn == NVML_SUCCESS) {
      series.pct = std::clamp(get.metrics[0].value, 0.0, 100.0);
    }
    n.gpm_free(series.sample);
  }
  series.sample = now;
  series.taken = now_time;
  return series.pct;
}

void NvmlInventory::ForgetGpmSamples(const Nvml& n) {
  for (auto& [key, series] : gpm_samples_) {
    if (series.sample != nullptr && n.gpm_free) n.gpm_free(series.sample);
  }
  gpm_samples_.clear();
}

core::Result<std::vector<GpuUsage>> NvmlInventory::Usage() {
  if (handle_ == nullptr) return core::FailedPreconditionError("NVML not loaded");
  Nvml n;
  n.Resolve(handle_);
  last_sample_us_.resize(gpu_count_, 0);
  WatchXids();
  // Drain the XID events that arrived since the last call (no waiting).
  nvmlEventData_t event{};
  while (xid_events_ != nullptr && n.event_wait(xid_events_, &event, 0) == NVML_SUCCESS) {
    unsigned int index = gpu_count_;  // Not one of ours: ignored.
    for (unsigned i = 0; i < gpu_count_; ++i) {
      nvmlDevice_t d = nullptr;
      if (n.by_index(i, &d) == NVML_SUCCESS && d == event.device) index = i;
    }
    if (index < gpu_count_) {
      ++xid_errors_[index];
      last_xid_[index] = static_cast<uint32_t>(event.eventData);
      if (!IsApplicationXid(last_xid_[index])) last_critical_xid_[index] = last_xid_[index];
    }
  }
  std::vector<GpuUsage> out;
  for (unsigned i = 0; i < gpu_count_; ++i) {
    nvmlDevice_t d = nullptr;
    nvmlReturn_t rc = n.by_index(i, &d);
    if (rc != NVML_SUCCESS) return NvmlError(n, rc, "GPU " + std::to_string(i));
    GpuUsage u;
    u.index = i;
    nvmlMemory_t mem{};
    if (n.memory(d, &mem) == NVML_SUCCESS) {
      u.memory_used = mem.used;
      u.memory_total = mem.total;
    }
    nvmlUtilization_t util{};
    if (n.utilization && n.utilization(d, &util) == NVML_SUCCESS) {
      u.utilization_pct = util.gpu;
      u.memory_util_pct = util.memory;
    } else {
      // A GPU in MIG mode: NVML's utilisation is not supported there; GPM
      // (Hopper and newer) measures the GPU and each GPU instance. Without
      // GPM there is no figure, which is not 0% (idle reclaim would end a
      // busy MIG job that read 0).
      u.utilization_known = false;
      if (i < gpm_supported_.size() && gpm_supported_[i]) {
        if (std::optional<double> pct = GpmUtil(n, d, i, kNoMigInstance)) {
          u.utilization_pct = static_cast<uint32_t>(std::lround(*pct));
          u.utilization_known = true;
        }
      }
    }
    if (i < mig_enabled_.size() && mig_enabled_[i]) {
      for (uint32_t gi : mig_gpu_instances_[i]) {
        MigUsage mu;
        mu.gpu_instance_id = gi;
        if (i < gpm_supported_.size() && gpm_supported_[i]) {
          if (std::optional<double> pct = GpmUtil(n, d, i, gi)) mu.utilization_pct = *pct;
        }
        u.mig.push_back(mu);
      }
    }
    unsigned int value = 0;
    if (n.temperature && n.temperature(d, NVML_TEMPERATURE_GPU, &value) == NVML_SUCCESS) {
      u.temperature_c = static_cast<int32_t>(value);
    }
    if (n.power && n.power(d, &value) == NVML_SUCCESS) u.power_mw = value;
    unsigned long long ecc = 0;
    if (n.ecc &&
        n.ecc(d, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &ecc) == NVML_SUCCESS) {
      u.ecc_corrected = static_cast<int64_t>(ecc);
    }
    if (n.ecc &&
        n.ecc(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &ecc) == NVML_SUCCESS) {
      u.ecc_uncorrected = static_cast<int64_t>(ecc);
    }
    u.xid_watched = xid_watched_[i];
    u.xid_errors = xid_errors_[i];
    u.last_xid = last_xid_[i];
    u.last_critical_xid = last_critical_xid_[i];
    if (n.processes) ReadProcesses(n, d, i < mig_enabled_.size() && mig_enabled_[i], &u);
    // Per-process SM use: the mean of each process's samples since the last
    // call. NVML keeps a short ring of samples per GPU; asking from the last
    // timestamp seen avoids counting one sample twice. A process without a
    // sample in the interval did not run a kernel: 0%.
    if (n.process_util && !u.processes.empty()) {
      nvmlProcessUtilizationSample_t samples[256];
      unsigned int count = 256;
      if (n.process_util(d, samples, &count, last_sample_us_[i]) == NVML_SUCCESS) {
        std::map<unsigned int, std::pair<uint64_t, uint32_t>> sum;  // pid -> (sum, n)
        for (unsigned k = 0; k < count && k < 256; ++k) {
          auto& [total, num] = sum[samples[k].pid];
          total += samples[k].smUtil;
          ++num;
          last_sample_us_[i] = std::max(last_sample_us_[i], samples[k].timeStamp);
        }
        for (GpuProcess& p : u.processes) {
          auto it = sum.find(p.pid);
          if (it != sum.end()) {
            p.sm_util_pct = static_cast<uint32_t>(it->second.first / it->second.second);
          }
        }
      }
    }
    out.push_back(u);
  }
  return out;
}

bool IsApplicationXid(uint32_t xid) {
  switch (xid) {
    case 13:   // Graphics engine exception (e.g. an illegal instruction).
    case 31:   // GPU memory page fault (an illegal address).
    case 43:   // The GPU stopped processing (a program's fault, reset by the driver).
    case 45:   // Preemptive cleanup after a program was killed.
    case 68:   // Video processor exception.
    case 109:  // Context switch timeout.
      return true;
    default:
      return false;
  }
}

std::string UnhealthyReason(const GpuUsage& usage) {
  if (usage.ecc_uncorrected > 0) {
    return std::to_string(usage.ecc_uncorrected) + " uncorrected ECC error" +
           (usage.ecc_uncorrected == 1 ? "" : "s");
  }
  if (usage.last_critical_xid != 0) return "XID " + std::to_string(usage.last_critical_xid);
  return "";
}

}  // namespace gpuslice::daemon
