#include "shim/driver.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sched.h>

#include <atomic>
#include <cstring>

#include "shim/hooks.h"
#include "shim/base/log.h"

extern "C" {
__attribute__((visibility("hidden"))) void* (*gpuslice_real_dlsym)(void*, const char*) = nullptr;
__attribute__((visibility("hidden"))) void* (*gpuslice_real_dlvsym)(void*, const char*,
                                                                   const char*) = nullptr;
}

namespace gpuslice::shim {
namespace {

// --- The real dlsym/dlvsym, looked up in libc's dynamic symbol table. ---

struct ElfLookup {
  const char* name;
  void* address;
};

uint32_t GnuHash(const char* s) {
  uint32_t h = 5381;
  for (; *s != '\0'; ++s) h = h * 33 + static_cast<unsigned char>(*s);
  return h;
}

uint32_t SysvHash(const char* s) {
  uint32_t h = 0;
  for (; *s != '\0'; ++s) {
    h = (h << 4) + static_cast<unsigned char>(*s);
    uint32_t g = h & 0xf0000000u;
    if (g != 0) h ^= g >> 24;
    h &= ~g;
  }
  return h;
}

// Finds a defined function symbol `name` in one loaded object.
void* FindInObject(const dl_phdr_info* info, const char* name) {
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) {
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    }
  }
  if (dyn == nullptr) return nullptr;
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const uint32_t* gnu_hash = nullptr;
  const uint32_t* sysv_hash = nullptr;
  // glibc relocates these d_ptr values in place on the architectures we
  // support; be tolerant of an unrelocated (offset) value anyway.
  auto addr = [&](ElfW(Addr) p) {
    return p < info->dlpi_addr ? p + info->dlpi_addr : p;
  };
  for (; dyn->d_tag != DT_NULL; ++dyn) {
    switch (dyn->d_tag) {
      case DT_SYMTAB:
        symtab = reinterpret_cast<const ElfW(Sym)*>(addr(dyn->d_un.d_ptr));
        break;
      case DT_STRTAB:
        strtab = reinterpret_cast<const char*>(addr(dyn->d_un.d_ptr));
        break;
      case DT_GNU_HASH:
        gnu_hash = reinterpret_cast<const uint32_t*>(addr(dyn->d_un.d_ptr));
        break;
      case DT_HASH:
        sysv_hash = reinterpret_cast<const uint32_t*>(addr(dyn->d_un.d_ptr));
        break;
      default:
        break;
    }
  }
  if (symtab == nullptr || strtab == nullptr) return nullptr;
  auto match = [&](uint32_t index) -> void* {
    const ElfW(Sym)& s = symtab[index];
    if (s.st_shndx == SHN_UNDEF || s.st_value == 0) return nullptr;
    if (ELF64_ST_TYPE(s.st_info) != STT_FUNC && ELF64_ST_TYPE(s.st_info) != STT_GNU_IFUNC) {
      return nullptr;
    }
    if (std::strcmp(strtab + s.st_name, name) != 0) return nullptr;
    return reinterpret_cast<void*>(info->dlpi_addr + s.st_value);
  };
  if (gnu_hash != nullptr) {
    const uint32_t nbuckets = gnu_hash[0];
    const uint32_t symoffset = gnu_hash[1];
    const uint32_t bloom_size = gnu_hash[2];
    const uint32_t* buckets =
        gnu_hash + 4 + bloom_size * (sizeof(ElfW(Addr)) / sizeof(uint32_t));
    const uint32_t* chain = buckets + nbuckets;
    const uint32_t h = GnuHash(name);
    uint32_t index = buckets[h % nbuckets];
    if (index < symoffset) return nullptr;
    for (;; ++index) {
      const uint32_t h2 = chain[index - symoffset];
      if ((h | 1) == (h2 | 1)) {
        if (void* p = match(index)) return p;
      }
      if ((h2 & 1) != 0) break;
    }
    return nullptr;
  }
  if (sysv_hash != nullptr) {
    const uint32_t nbucket = sysv_hash[0];
    const uint32_t* bucket = sysv_hash + 2;
    const uint32_t* chain = bucket + nbucket;
    for (uint32_t i = bucket[SysvHash(name) % nbucket]; i != STN_UNDEF; i = chain[i]) {
      if (void* p = match(i)) return p;
    }
  }
  return nullptr;
}

int FindInLibc(dl_phdr_info* info, size_t, void* data) {
  auto* lookup = static_cast<ElfLookup*>(data);
  const char* path = info->dlpi_name;
  if (path == nullptr) return 0;
  const char* base = std::strrchr(path, '/');
  base = base != nullptr ? base + 1 : path;
  // glibc >= 2.34 has dlsym in libc.so.6; older ones in libdl.so.2.
  if (std::strncmp(base, "libc.so", 7) != 0 && std::strncmp(base, "libdl.so", 8) != 0) return 0;
  lookup->address = FindInObject(info, lookup->name);
  return lookup->address != nullptr ? 1 : 0;
}

void* FindLibcFunction(const char* name) {
  ElfLookup lookup{name, nullptr};
  dl_iterate_phdr(FindInLibc, &lookup);
  return lookup.address;
}

// --- Loading the driver and NVML. ---

// 0: not tried, 1: loading, 2: loaded, 3: failed.
std::atomic<int> g_cuda_state{0};
std::atomic<int> g_nvml_state{0};
void* g_cuda_handle = nullptr;
void* g_nvml_handle = nullptr;
DriverExtras g_extras;
NvmlFunctions g_nvml_own;
std::atomic<int> g_nvml_own_state{0};  // 0: not tried, 1: busy, 2: ok, 3: failed.

// The thread currently loading a library: its nested calls (a constructor
// of libcuda calling dlsym, say) must not wait for themselves.
thread_local bool t_loading __attribute__((tls_model("initial-exec"))) = false;

template <typename F>
bool RunOnce(std::atomic<int>& state, F&& body) {
  int s = state.load(std::memory_order_acquire);
  if (s == 2) return true;
  if (s == 3) return false;
  int expected = 0;
  // Acquire/release: the winner's writes (handles, tables) happen-before
  // any thread that later sees state 2.
  if (state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    t_loading = true;
    bool ok = body();
    t_loading = false;
    state.store(ok ? 2 : 3, std::memory_order_release);
    return ok;
  }
  if (t_loading) return false;  // Re-entered from our own load.
  // Another thread is loading: dlopen of a present library takes
  // milliseconds; yield until it is done.
  while ((s = state.load(std::memory_order_acquire)) == 1) sched_yield();
  return s == 2;
}

void* Sym(void* handle, const char* name) {
  return gpuslice_real_dlsym != nullptr ? gpuslice_real_dlsym(handle, name) : nullptr;
}

}  // namespace

bool LoadCuda() {
  return RunOnce(g_cuda_state, [] {
    if (gpuslice_resolve_real_dlsym() == nullptr) return false;
    g_cuda_handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (g_cuda_handle == nullptr) {
      GPUSLICE_LOG(kInfo, "cannot load the CUDA driver libcuda.so.1: %s", dlerror());
      return false;
    }
    for (int i = 0; i < kHookCount; ++i) {
      if (kHooks[i].library == HookLibrary::kCuda) g_real[i] = Sym(g_cuda_handle, kHooks[i].symbol);
    }
    g_extras.cuCtxGetDevice =
        reinterpret_cast<PFN_cuCtxGetDevice_v2000>(Sym(g_cuda_handle, "cuCtxGetDevice"));
    g_extras.get_uuid_v2 =
        reinterpret_cast<PFN_cuDeviceGetUuid_v11040>(Sym(g_cuda_handle, "cuDeviceGetUuid_v2"));
    g_extras.get_uuid =
        reinterpret_cast<PFN_cuDeviceGetUuid_v9020>(Sym(g_cuda_handle, "cuDeviceGetUuid"));
    g_extras.cuMemPoolGetAttribute = reinterpret_cast<PFN_cuMemPoolGetAttribute_v11020>(
        Sym(g_cuda_handle, "cuMemPoolGetAttribute"));
    g_extras.cuDeviceGetMemPool =
        reinterpret_cast<PFN_cuDeviceGetMemPool_v11020>(Sym(g_cuda_handle, "cuDeviceGetMemPool"));
    g_extras.cuCtxGetCurrent =
        reinterpret_cast<PFN_cuCtxGetCurrent_v4000>(Sym(g_cuda_handle, "cuCtxGetCurrent"));
    g_extras.cuDevicePrimaryCtxGetState = reinterpret_cast<PFN_cuDevicePrimaryCtxGetState_v7000>(
        Sym(g_cuda_handle, "cuDevicePrimaryCtxGetState"));
    return true;
  });
}

bool CudaLoaded() { return g_cuda_state.load(std::memory_order_acquire) == 2; }
void* CudaHandle() { return CudaLoaded() ? g_cuda_handle : nullptr; }
const DriverExtras& Extras() { return g_extras; }

bool LoadNvml() {
  return RunOnce(g_nvml_state, [] {
    if (gpuslice_resolve_real_dlsym() == nullptr) return false;
    g_nvml_handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (g_nvml_handle == nullptr) {
      GPUSLICE_LOG(kInfo, "cannot load libnvidia-ml.so.1: %s", dlerror());
      return false;
    }
    for (int i = 0; i < kHookCount; ++i) {
      if (kHooks[i].library == HookLibrary::kNvml) g_real[i] = Sym(g_nvml_handle, kHooks[i].symbol);
    }
    g_nvml_own.nvmlInit_v2 = reinterpret_cast<nvmlInit_v2_fn>(Sym(g_nvml_handle, "nvmlInit_v2"));
    g_nvml_own.nvmlDeviceGetHandleByUUID = reinterpret_cast<nvmlDeviceGetHandleByUUID_fn>(
        Sym(g_nvml_handle, "nvmlDeviceGetHandleByUUID"));
    g_nvml_own.nvmlDeviceGetUUID =
        reinterpret_cast<nvmlDeviceGetUUID_fn>(Sym(g_nvml_handle, "nvmlDeviceGetUUID"));
    g_nvml_own.nvmlDeviceGetComputeRunningProcesses_v3 =
        reinterpret_cast<nvmlDeviceGetComputeRunningProcesses_v3_fn>(
            Sym(g_nvml_handle, "nvmlDeviceGetComputeRunningProcesses_v3"));
    return true;
  });
}

void* NvmlHandle() { return g_nvml_state.load(std::memory_order_acquire) == 2 ? g_nvml_handle : nullptr; }

const NvmlFunctions& NvmlSymbols() { return g_nvml_own; }

const NvmlFunctions* NvmlForOwnUse() {
  bool ok = RunOnce(g_nvml_own_state, [] {
    if (!LoadNvml()) return false;
    const NvmlFunctions& f = g_nvml_own;
    if (f.nvmlInit_v2 == nullptr || f.nvmlDeviceGetHandleByUUID == nullptr ||
        f.nvmlDeviceGetComputeRunningProcesses_v3 == nullptr) {
      GPUSLICE_LOG(kInfo, "libnvidia-ml.so.1 lacks the per-process memory query");
      return false;
    }
    // Never shut down: NVML counts init/shutdown pairs, so this one does
    // not disturb the application's own use.
    nvmlReturn_t r = f.nvmlInit_v2();
    if (r != NVML_SUCCESS) {
      GPUSLICE_LOG(kInfo, "nvmlInit_v2 failed (%d); context memory is not counted", int(r));
      return false;
    }
    return true;
  });
  return ok ? &g_nvml_own : nullptr;
}

}  // namespace gpuslice::shim

extern "C" {

__attribute__((visibility("hidden"))) void* gpuslice_resolve_real_dlsym() {
  using namespace gpuslice::shim;
  if (gpuslice_real_dlsym == nullptr) {
    // A benign race: every thread finds the same addresses.
    gpuslice_real_dlvsym =
        reinterpret_cast<void* (*)(void*, const char*, const char*)>(FindLibcFunction("dlvsym"));
    gpuslice_real_dlsym =
        reinterpret_cast<void* (*)(void*, const char*)>(FindLibcFunction("dlsym"));
  }
  return reinterpret_cast<void*>(gpuslice_real_dlsym);
}

__attribute__((visibility("hidden"))) void* gpuslice_resolve_real_dlvsym() {
  gpuslice_resolve_real_dlsym();
  return reinterpret_cast<void*>(gpuslice_real_dlvsym);
}
}
