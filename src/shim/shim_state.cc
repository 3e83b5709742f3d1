#include "shim/shim_state.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "shim/base/config.h"
#include "shim/context_admission.h"
#include "shim/driver.h"
#include "slice/region/limits_page.h"
#include "shim/base/log.h"
#include "shim/pool_tracker.h"
#include "slice/region/region.h"
#include "shim/base/resume_on_demand.h"

namespace gpuslice::shim {

std::atomic<int> g_phase{kPhaseUninit};
bool g_disabled = false;

namespace {

constexpr int kMaxOrdinals = 64;

// Set once during initialisation, before the phase is published.
slice::Region* g_region = nullptr;
slice::layout::ProcessSlot* g_slot = nullptr;
uint32_t g_slot_index = 0;
bool g_have_slot = false;
bool g_standalone = false;  // The region is a standalone one (ours to clean up).
ShimConfig* g_config = nullptr;

// A slot that is never part of any region: used when the slice has no free
// slot, so that admission has something to point at (and refuses: see
// Admit).
slice::layout::ProcessSlot g_orphan_slot{};

AllocTable g_pointers;
AllocTable g_vmm_handles;
AllocTable g_arrays;

// Visible ordinal -> slice device index + 1; 0: not looked up yet;
// kRefused: not in the slice. Relaxed: the value is derived from immutable
// facts (the device's UUID and the region entry), so every thread that
// computes it computes the same.
std::atomic<int> g_ordinal_map[kMaxOrdinals];

thread_local bool t_initializing __attribute__((tls_model("initial-exec"))) = false;

uint64_t UnixNanos() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// A daemon slice whose region cannot be used (the job itself, or one of
// its processes, overwrote it): a region of this process's own, unlinked at
// once, with the devices and limits of the daemon's limits page, so that
// this process is still held to the slice's limits on its own rather than
// to none. Other processes of the job each get theirs; the daemon's
// watchdog bounds what they hold together (docs/SECURITY.md).
core::Result<std::unique_ptr<slice::Region>> PrivateRegion(const std::string& limits_path) {
  GPUSLICE_ASSIGN_OR_RETURN(std::unique_ptr<slice::LimitsPage> page,
                            slice::LimitsPage::OpenReadOnly(limits_path));
  slice::RegionOptions options;
  options.name = "private";
  options.closed = true;
  for (const slice::DeviceControls& d : page->Devices())
    options.devices.push_back({d.uuid, d.limit_bytes});
  char path[96];
  std::snprintf(path, sizeof(path), "/dev/shm/gpuslice-private-%d-%llu", static_cast<int>(getpid()),
                static_cast<unsigned long long>(UnixNanos()));
  core::Result<std::unique_ptr<slice::Region>> region = slice::Region::Create(path, options);
  unlink(path);
  return region;
}

void AtForkChild() {
  // The child holds none of its parent's memory and must not return it
  // when it exits: forget the slot and the tables, claim a new slot lazily.
  int phase = g_phase.load(std::memory_order_relaxed);
  if (phase == kPhaseEnforcing || phase == kPhaseReattach) {
    g_have_slot = false;
    g_slot = &g_orphan_slot;
    g_pointers.Clear();
    g_vmm_handles.Clear();
    g_arrays.Clear();
    ForgetPools();
    ForgetContexts();
    g_phase.store(kPhaseReattach, std::memory_order_release);
  }
}

bool ClaimOwnSlot() {
  uint64_t start = slice::ProcessStartTime(getpid()).value_or(0);
  core::Result<uint32_t> slot = g_region->ClaimSlot(getpid(), start);
  if (!slot.ok()) {
    GPUSLICE_LOG(kError, "%s; this process may not allocate GPU memory",
                 slot.status().message().c_str());
    g_have_slot = false;
    g_slot = &g_orphan_slot;
    return false;
  }
  g_slot_index = *slot;
  g_slot = &g_region->slot(*slot);
  g_have_slot = true;
  return true;
}

// Runs once per process (and once more in a forked child). Returns the
// phase to publish.
int Initialize() {
  if (!LoadCuda()) return kPhasePassThrough;
  if (g_config == nullptr) {
    g_config = new ShimConfig(ReadShimConfig([](const char* name) { return getenv(name); }));
    SetLogLevel(g_config->log_level);
    for (const std::string& problem : g_config->problems) {
      GPUSLICE_LOG(kError, "%s", problem.c_str());
    }
  }
  const ShimConfig& config = *g_config;
  if (config.disabled) return kPhasePassThrough;
  if (g_region == nullptr) {
    if (config.slice_path.empty()) return kPhasePassThrough;
    // An existing region always wins: whatever GPUSLICE_MEMORY_LIMIT says
    // (even a bad value) cannot lift a slice the daemon or an ancestor made.
    // A daemon slice's page first: it says whether the slice's region
    // belongs to a group of its own (LimitsHeader::shared_gid).
    core::Result<std::unique_ptr<slice::LimitsPage>> page = core::NotFoundError("no limits page");
    if (!config.limits_path.empty()) page = slice::LimitsPage::OpenReadOnly(config.limits_path);
    const uint32_t shared_gid = page.ok() ? (*page)->header().shared_gid : 0;
    core::Result<std::unique_ptr<slice::Region>> region =
        slice::Region::Open(config.slice_path, shared_gid);
    if (!region.ok() && region.status().code() == core::StatusCode::kNotFound) {
      // No region yet: a standalone slice (a valid limit) creates it.
      if (!config.Standalone()) {
        if (getenv(kEnvMemoryLimit) != nullptr || getenv(kEnvComputeShare) != nullptr) {
          return kPhasePassThrough;  // Reported above.
        }
        GPUSLICE_LOG(kError, "%s: %s; running without a memory limit", kEnvSlice,
                     region.status().message().c_str());
        return kPhasePassThrough;
      }
      std::string dir = config.slice_path.substr(0, config.slice_path.rfind('/'));
      core::Status prepared = PrepareSliceDir(dir, geteuid());
      if (!prepared.ok()) {
        GPUSLICE_LOG(kError, "%s; running without a memory limit", prepared.message().c_str());
        return kPhasePassThrough;
      }
      slice::RegionOptions options;
      options.name = "standalone";
      region = slice::Region::OpenOrCreate(config.slice_path, options);
    }
    bool private_region = false;
    if (!region.ok() && !config.limits_path.empty()) {
      core::Result<std::unique_ptr<slice::Region>> own = PrivateRegion(config.limits_path);
      private_region = own.ok();
      if (own.ok()) {
        GPUSLICE_LOG(kError, "%s: %s; this process alone is held to the slice's limits", kEnvSlice,
                     region.status().message().c_str());
        region = std::move(own);
      }
    }
    if (!region.ok()) {
      GPUSLICE_LOG(kError, "%s: %s; running without a memory limit", kEnvSlice,
                   region.status().message().c_str());
      return kPhasePassThrough;
    }
    if (!config.limits_path.empty()) {
      // A daemon slice: every limit, share and pause comes from the daemon's
      // read-only limits page, never from the region (the job's own file).
      // A page we cannot use means no memory, not no limit.
      if (!page.ok()) {
        GPUSLICE_LOG(kError, "%s: %s; this process gets no GPU memory", kEnvLimits,
                     page.status().message().c_str());
      }
      (*region)->AttachLimits(page.ok() ? std::move(*page) : nullptr);
    }
    // Standalone regions are open (no closed flag); those are ours to remove.
    g_standalone = !(*region)->closed();
    g_region = region->release();
    // Published with the phase (resume_on_demand.h); null without a page,
    // and in a private region, whose requests nobody reads: such a process
    // goes to the driver as before (its calls wait there for a resume).
    if (!private_region) {
      SetResumeWords(g_region->SuspensionWord(), &g_region->header().resume_request);
    }
    if (!g_pointers.Init(20) || !g_vmm_handles.Init(16) || !g_arrays.Init(14)) {
      GPUSLICE_LOG(kError, "cannot reserve the allocation tables; running without a limit");
      return kPhasePassThrough;
    }
    pthread_atfork(nullptr, nullptr, AtForkChild);
    GPUSLICE_LOG(kInfo, "enforcing slice %s", g_region->path().c_str());
  }
  ClaimOwnSlot();
  return kPhaseEnforcing;
}

__attribute__((constructor)) void OnLoad() {
  // Cheap by design: two getenv calls, one stat, no file writes.
  const char* disable = getenv(kEnvDisable);
  g_disabled = disable != nullptr && std::strcmp(disable, "1") == 0;
  if (g_disabled) return;
  gpuslice_resolve_real_dlsym();
  const char* limit = getenv(kEnvMemoryLimit);
  const char* share = getenv(kEnvComputeShare);
  const bool standalone = (limit != nullptr && *limit != '\0') || (share != nullptr && *share != '\0');
  if (standalone && getenv(kEnvSlice) == nullptr) {
    // This process roots a standalone slice: name the region now so that
    // children forked or exec'd before our first CUDA call join it.
    std::string dir = StandaloneSliceDir(getenv("XDG_RUNTIME_DIR"), geteuid());
    std::string path = StandaloneSlicePath(dir, getpid(), UnixNanos());
    setenv(kEnvSlice, path.c_str(), 0);
  }
}

__attribute__((destructor)) void OnUnload() {
  int expected = kPhaseEnforcing;
  if (!g_phase.compare_exchange_strong(expected, kPhaseShutdown, std::memory_order_acq_rel)) {
    return;
  }
  // The driver frees everything this process held as it exits; frees that
  // still arrive after this point are not counted (phase is shutdown).
  if (g_have_slot) g_region->ReleaseSlot(g_slot_index, getpid());
  if (g_standalone && g_region->Processes().empty()) {
    // Last one out of a standalone slice: remove the file. (A descendant
    // that opened the file but has not claimed its slot yet would end up
    // alone in the removed region; docs/SHIM.md, "Known limits".)
    (void)slice::Region::Remove(g_region->path());
  }
}

}  // namespace

int StartSlow() {
  int phase = g_phase.load(std::memory_order_acquire);
  while (true) {
    if (phase == kPhaseUninit || phase == kPhaseReattach) {
      if (g_phase.compare_exchange_weak(phase, kPhaseInitializing, std::memory_order_acq_rel)) {
        t_initializing = true;
        int result = phase == kPhaseReattach ? (ClaimOwnSlot(), kPhaseEnforcing) : Initialize();
        t_initializing = false;
        // Release: everything Initialize() set up is visible to a thread
        // that acquires this phase.
        g_phase.store(result, std::memory_order_release);
        return result;
      }
      continue;
    }
    if (phase != kPhaseInitializing) return phase;
    // Our own initialisation calling back into a wrapper: pass through.
    if (t_initializing) return kPhasePassThrough;
    sched_yield();
    phase = g_phase.load(std::memory_order_acquire);
  }
}

bool DriverReady() { return LoadCuda(); }

slice::layout::DeviceEntry& SliceDevice(int index) { return g_region->device(uint32_t(index)); }
slice::layout::ProcessSlot& OwnSlot() { return *g_slot; }
bool HaveSlot() { return g_have_slot; }
uint32_t OwnSlotIndex() { return g_slot_index; }
AllocTable& Pointers() { return g_pointers; }
slice::Region* SliceRegion() { return g_region; }
const ShimConfig* Config() { return g_config; }
AllocTable& VmmHandles() { return g_vmm_handles; }
AllocTable& Arrays() { return g_arrays; }

int SliceDeviceForOrdinal(CUdevice ordinal) {
  if (ordinal < 0 || ordinal >= kMaxOrdinals) return kRefused;
  int known = g_ordinal_map[ordinal].load(std::memory_order_relaxed);
  if (known > 0) return known - 1;
  if (known == kRefused) return kRefused;
  // Slow path, once per ordinal: the device's UUID, then its slice entry.
  CUuuid uuid{};
  CUresult r = CUDA_ERROR_NOT_SUPPORTED;
  if (Extras().get_uuid_v2 != nullptr) r = Extras().get_uuid_v2(&uuid, ordinal);
  if (r != CUDA_SUCCESS && Extras().get_uuid != nullptr) {
    r = Extras().get_uuid(&uuid, ordinal);
  }
  if (r != CUDA_SUCCESS) return kNoContext;  // Not initialised yet: try again later.
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char text[48];
  std::snprintf(text, sizeof(text),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  core::Result<uint32_t> index = g_region->FindOrAddDevice(text, g_config->LimitFor(ordinal));
  int value;
  if (index.ok()) {
    value = int(*index) + 1;
    slice::layout::DeviceEntry& entry = g_region->device(*index);
    if (g_config->has_share && !g_region->closed() &&
        entry.compute_share_milli.load(std::memory_order_relaxed) == 0) {
      // Standalone: the first process to use the device fixes its share,
      // as with the memory limit. Mode and priority go first so that a
      // reader that sees the share sees them.
      entry.compute_mode.store(g_config->compute_mode, std::memory_order_relaxed);
      entry.priority.store(g_config->priority, std::memory_order_relaxed);
      uint32_t none = 0;
      entry.compute_share_milli.compare_exchange_strong(none, g_config->share_milli,
                                                        std::memory_order_release);
    }
    GPUSLICE_LOG(kInfo, "device %d (%s) is slice device %u, limit %llu bytes", int(ordinal), text,
                 *index, static_cast<unsigned long long>(g_region->LimitOf(*index)));
  } else {
    GPUSLICE_LOG(kWarn, "device %d: %s; it gets no memory", int(ordinal),
                 index.status().message().c_str());
    value = kRefused;
  }
  g_ordinal_map[ordinal].store(value, std::memory_order_relaxed);
  return value > 0 ? value - 1 : kRefused;
}

int CurrentSliceDevice() {
  CUdevice device = -1;
  if (Extras().cuCtxGetDevice == nullptr || Extras().cuCtxGetDevice(&device) != CUDA_SUCCESS) {
    return kNoContext;
  }
  return SliceDeviceForOrdinal(device);
}

bool Admit(int dev, uint64_t bytes) {
  if (!g_have_slot) return false;
  slice::layout::DeviceEntry& device = SliceDevice(dev);
  if (slice::TryCharge(device, *g_slot, uint32_t(dev), bytes, g_region->LimitOf(uint32_t(dev)))) {
    return true;
  }
  // Would fail: reclaim what dead processes and idle pools hold, then retry.
  g_region->Sweep(slice::RealProcessProbe());
  ResyncPools();
  if (slice::TryCharge(device, *g_slot, uint32_t(dev), bytes, g_region->LimitOf(uint32_t(dev)))) {
    return true;
  }
  if (WaitForContextLearner(dev) &&
      slice::TryCharge(device, *g_slot, uint32_t(dev), bytes, g_region->LimitOf(uint32_t(dev)))) {
    return true;
  }
  slice::CountRefusal(device);
  return false;
}

uint64_t SliceLimit(int dev) { return g_region->LimitOf(uint32_t(dev)); }
uint64_t SliceUsed(int dev) {
  return SliceDevice(dev).used_bytes.load(std::memory_order_relaxed);
}

int SliceDeviceForUuid(const char* uuid) {
  core::Result<uint32_t> index = g_region->FindDevice(uuid);
  if (index.ok()) return int(*index);
  // An NVML query before any CUDA use of the device: in an open
  // (standalone) slice with one limit for every device, the entry can be
  // made from NVML's side too; per-ordinal limits cannot (NVML indices are
  // not CUDA ordinals).
  auto all = g_config->limits.find(-1);
  if (g_region->closed() || !g_config->has_limit || all == g_config->limits.end()) return -1;
  index = g_region->FindOrAddDevice(uuid, all->second);
  return index.ok() ? int(*index) : -1;
}

}  // namespace gpuslice::shim
