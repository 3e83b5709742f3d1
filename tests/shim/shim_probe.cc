// A CUDA program for the shim's end-to-end tests, written against the real
// cuda.h and linked with the toolkit's stub libcuda.so: at run time it gets
// the simulated driver (LD_LIBRARY_PATH) and, under test, the shim
// (LD_PRELOAD). It prints "key=value" lines that shim_e2e_test parses.
//
//   shim_probe info                       device UUIDs, total/free as seen
//   shim_probe nvml                       NVML memory info of device 0
//   shim_probe fill ROUTE CHUNK           allocate CHUNK bytes until refused
//   shim_probe alloc ROUTE BYTES          one allocation
//   shim_probe serve ROUTE                read "alloc N" / "free" / "quit"
//                                         commands on stdin, answer each
//   shim_probe race THREADS ITERS MAX     random cuMemAlloc/cuMemFree
//   shim_probe procaddr BYTES             cuMemAlloc via cuGetProcAddress(_v2)
//   shim_probe dlsym BYTES                cuMemAlloc_v2 via dlopen + dlsym/dlvsym
//   shim_probe fill2 CHUNK                fill devices 0 and 1 (one context each)
//   shim_probe forkalloc N BYTES          N forked children allocate at once
//   shim_probe spawn BYTES                exec two children; the second
//                                         allocates while the first holds
//   shim_probe ctx CTXROUTE BYTES         after cuInit, on "go": a context on
//                                         device 0 by CTXROUTE and one
//                                         allocation of BYTES in it; held
//                                         until "quit"
//   shim_probe ctxserve                   read context commands on stdin
//                                         (retain, release, reset, create
//                                         CTXROUTE, destroy, badcreate,
//                                         alloc N, free, quit), answer each
//
// ROUTE: alloc, pitch, managed, async, pool, vmm, array, array3d.
// CTXROUTE: primary (cuDevicePrimaryCtxRetain), runtime (the same through
// cuGetProcAddress, as CUDA 12+ runtimes reach it), v2 and v3 (cuCtxCreate
// through cuGetProcAddress at 3020 and 11040), v4 (cuCtxCreate_v4, where the
// header has it; else v3), dlsym (cuCtxCreate_v2 through dlopen + dlsym).

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "core/nvml_abi.h"

namespace {

void Check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::printf("fatal=%s:%d\n", what, int(r));
    std::exit(2);
  }
}

CUcontext Init() {
  Check(cuInit(0), "cuInit");
  CUdevice dev;
  Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return ctx;
}

std::string Uuid(CUdevice dev) {
  CUuuid u;
  Check(cuDeviceGetUuid(&u, dev), "cuDeviceGetUuid");
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char text[48];
  std::snprintf(text, sizeof(text),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}

// One allocation made by some route, and how to free it.
struct Allocation {
  std::string route;
  CUdeviceptr ptr = 0;
  CUmemGenericAllocationHandle handle = 0;
  CUarray array = nullptr;
};

CUmemoryPool g_pool = nullptr;

CUresult Allocate(const std::string& route, size_t bytes, Allocation* out) {
  out->route = route;
  if (route == "alloc") return cuMemAlloc(&out->ptr, bytes);
  if (route == "managed") return cuMemAllocManaged(&out->ptr, bytes, CU_MEM_ATTACH_GLOBAL);
  if (route == "pitch") {
    size_t pitch = 0;
    // Rows of an odd width so that the pitch is larger than the width.
    return cuMemAllocPitch(&out->ptr, &pitch, 1000, bytes / 1024, 4);
  }
  if (route == "async") {
    CUresult r = cuMemAllocAsync(&out->ptr, bytes, nullptr);
    if (r == CUDA_SUCCESS) r = cuStreamSynchronize(nullptr);
    return r;
  }
  if (route == "pool") {
    if (g_pool == nullptr) {
      CUmemPoolProps props{};
      props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      props.location.id = 0;
      Check(cuMemPoolCreate(&g_pool, &props), "cuMemPoolCreate");
    }
    return cuMemAllocFromPoolAsync(&out->ptr, bytes, g_pool, nullptr);
  }
  if (route == "vmm") {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    Check(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "gran");
    size_t size = (bytes + gran - 1) / gran * gran;
    return cuMemCreate(&out->handle, size, &prop, 0);
  }
  if (route == "array" || route == "array3d") {
    // float4 elements: 16 bytes each, 1024 per row.
    if (route == "array") {
      CUDA_ARRAY_DESCRIPTOR d{};
      d.Width = 1024;
      d.Height = bytes / (1024 * 16);
      d.Format = CU_AD_FORMAT_FLOAT;
      d.NumChannels = 4;
      return cuArrayCreate(&out->array, &d);
    }
    CUDA_ARRAY3D_DESCRIPTOR d{};
    d.Width = 1024;
    d.Height = 16;
    d.Depth = bytes / (1024 * 16 * 16);
    d.Format = CU_AD_FORMAT_FLOAT;
    d.NumChannels = 4;
    return cuArray3DCreate(&out->array, &d);
  }
  std::printf("fatal=unknown route %s\n", route.c_str());
  std::exit(2);
}

CUresult Free(const Allocation& a) {
  if (a.route == "vmm") return cuMemRelease(a.handle);
  if (a.route == "array" || a.route == "array3d") return cuArrayDestroy(a.array);
  if (a.route == "async" || a.route == "pool") {
    CUresult r = cuMemFreeAsync(a.ptr, nullptr);
    if (r == CUDA_SUCCESS) r = cuStreamSynchronize(nullptr);
    return r;
  }
  return cuMemFree(a.ptr);
}

void PrintMemInfo(const char* prefix) {
  size_t free = 0, total = 0;
  Check(cuMemGetInfo(&free, &total), "cuMemGetInfo");
  std::printf("%sfree=%zu\n%stotal=%zu\n", prefix, free, prefix, total);
}

int Info() {
  Init();
  int count = 0;
  Check(cuDeviceGetCount(&count), "cuDeviceGetCount");
  std::printf("count=%d\n", count);
  for (int i = 0; i < count; ++i) {
    size_t total = 0;
    Check(cuDeviceTotalMem(&total, i), "cuDeviceTotalMem");
    std::printf("uuid%d=%s\ndevice_total%d=%zu\n", i, Uuid(i).c_str(), i, total);
  }
  PrintMemInfo("mem_");
  return 0;
}

int Nvml() {
  Init();  // So the shim has seen the device.
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (lib == nullptr) {
    std::printf("fatal=no libnvidia-ml.so.1\n");
    return 2;
  }
  auto init = reinterpret_cast<nvmlInit_v2_fn>(dlsym(lib, "nvmlInit_v2"));
  auto by_index =
      reinterpret_cast<nvmlDeviceGetHandleByIndex_v2_fn>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto info = reinterpret_cast<nvmlDeviceGetMemoryInfo_fn>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  auto info2 =
      reinterpret_cast<nvmlDeviceGetMemoryInfo_v2_fn>(dlsym(lib, "nvmlDeviceGetMemoryInfo_v2"));
  if (init() != NVML_SUCCESS) return 2;
  nvmlDevice_t dev;
  if (by_index(0, &dev) != NVML_SUCCESS) return 2;
  nvmlMemory_t m{};
  if (info(dev, &m) != NVML_SUCCESS) return 2;
  std::printf("nvml_total=%llu\nnvml_free=%llu\nnvml_used=%llu\n", m.total, m.free, m.used);
  nvmlMemory_v2_t m2{};
  m2.version = nvmlMemory_v2;
  if (info2(dev, &m2) != NVML_SUCCESS) return 2;
  std::printf("nvml2_total=%llu\nnvml2_free=%llu\n", m2.total, m2.free);
  return 0;
}

int Fill(const std::string& route, size_t chunk) {
  Init();
  std::vector<Allocation> held;
  size_t total = 0;
  CUresult r = CUDA_SUCCESS;
  while (held.size() < 100000) {
    Allocation a;
    r = Allocate(route, chunk, &a);
    if (r != CUDA_SUCCESS) break;
    held.push_back(a);
    total += chunk;
  }
  std::printf("allocated=%zu\nchunks=%zu\nerror=%d\n", total, held.size(), int(r));
  PrintMemInfo("full_");
  for (const Allocation& a : held) Check(Free(a), "free");
  PrintMemInfo("after_");
  // Everything is free again: the same amount must fit a second time.
  size_t again = 0;
  held.clear();
  while (held.size() < 100000) {
    Allocation a;
    if (Allocate(route, chunk, &a) != CUDA_SUCCESS) break;
    held.push_back(a);
    again += chunk;
  }
  std::printf("again=%zu\n", again);
  for (const Allocation& a : held) Check(Free(a), "free");
  return 0;
}

int FillTwoDevices(size_t chunk) {
  Check(cuInit(0), "cuInit");
  std::vector<CUdeviceptr> held[2];
  CUcontext ctx[2];
  for (int d = 0; d < 2; ++d) {
    Check(cuDevicePrimaryCtxRetain(&ctx[d], d), "cuDevicePrimaryCtxRetain");
    Check(cuCtxSetCurrent(ctx[d]), "cuCtxSetCurrent");
    CUdeviceptr p;
    while (held[d].size() < 10000 && cuMemAlloc(&p, chunk) == CUDA_SUCCESS) held[d].push_back(p);
    std::printf("allocated%d=%zu\n", d, held[d].size() * chunk);
  }
  for (int d = 0; d < 2; ++d) {
    Check(cuCtxSetCurrent(ctx[d]), "cuCtxSetCurrent");
    for (CUdeviceptr p : held[d]) Check(cuMemFree(p), "cuMemFree");
  }
  return 0;
}

int AllocOnce(const std::string& route, size_t bytes) {
  Init();
  Allocation a;
  CUresult r = Allocate(route, bytes, &a);
  std::printf("result=%d\n", int(r));
  if (r == CUDA_SUCCESS) Check(Free(a), "free");
  return 0;
}

int Serve(const std::string& route) {
  Init();
  std::vector<Allocation> held;
  std::printf("ready=1\n");
  std::fflush(stdout);
  std::string cmd;
  while (std::cin >> cmd) {
    if (cmd == "alloc") {
      size_t bytes = 0;
      std::cin >> bytes;
      Allocation a;
      CUresult r = Allocate(route, bytes, &a);
      if (r == CUDA_SUCCESS) held.push_back(a);
      std::printf("result=%d\n", int(r));
    } else if (cmd == "free") {
      for (const Allocation& a : held) Check(Free(a), "free");
      held.clear();
      std::printf("freed=1\n");
    } else if (cmd == "info") {
      PrintMemInfo("");
    } else {
      break;
    }
    std::fflush(stdout);
  }
  return 0;
}

int Race(int threads, int iterations, size_t max_size) {
  Init();
  CUcontext ctx;
  Check(cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  std::atomic<long> ok{0}, oom{0}, other{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      cuCtxSetCurrent(ctx);
      uint64_t x = 0x9E3779B97F4A7C15ull ^ (uint64_t(getpid()) << 16) ^ uint64_t(t);
      std::vector<CUdeviceptr> held;
      for (int i = 0; i < iterations; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (held.size() < 3 && (x & 1)) {
          CUdeviceptr p;
          CUresult r = cuMemAlloc(&p, 1 + x % max_size);
          if (r == CUDA_SUCCESS) {
            held.push_back(p);
            ok++;
          } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            oom++;
          } else {
            other++;
          }
        } else if (!held.empty()) {
          cuMemFree(held.back());
          held.pop_back();
        }
      }
      for (CUdeviceptr p : held) cuMemFree(p);
    });
  }
  for (auto& t : pool) t.join();
  std::printf("ok=%ld\noom=%ld\nother=%ld\n", ok.load(), oom.load(), other.load());
  return 0;
}

// cuGetProcAddress as the header declares it: cuda.h 12.0+ maps the name to
// cuGetProcAddress_v2 (with a query result), older headers have only the
// four-argument original. The v2-only lines are printed only where it exists.
CUresult GetProc(const char* name, void** fn, int version, cuuint64_t flags) {
#if CUDA_VERSION >= 12000
  CUdriverProcAddressQueryResult status;
  CUresult r = cuGetProcAddress(name, fn, version, flags, &status);
  if (r == CUDA_SUCCESS && status != CU_GET_PROC_ADDRESS_SUCCESS) return CUDA_ERROR_NOT_FOUND;
  return r;
#else
  return cuGetProcAddress(name, fn, version, flags);
#endif
}

int ProcAddress(size_t bytes) {
  Init();
  // A version the header knows, so the driver answers for this header's ABI.
  constexpr int kVersion = CUDA_VERSION >= 12000 ? 12000 : 11030;
  void* fn = nullptr;
  CUdeviceptr p = 0;
  CUresult r;
  // cuGetProcAddress_v2 as a CUDA 12+ runtime reaches it: looked up by name
  // on the driver's handle, whatever header this program was built with
  // (older ones lack the type, so it is spelt out: CUDA 12.0's ABI, the
  // status being a plain int enum). A driver without it prints v2_available=0.
  using GetProcV2 = CUresult (*)(const char*, void**, int, cuuint64_t, int*);
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto get_proc_v2 =
      reinterpret_cast<GetProcV2>(lib != nullptr ? dlsym(lib, "cuGetProcAddress_v2") : nullptr);
  std::printf("v2_available=%d\n", get_proc_v2 != nullptr ? 1 : 0);
  if (get_proc_v2 != nullptr) {
    int status = -1;
    Check(get_proc_v2("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status),
          "cuGetProcAddress_v2");
    std::printf("v2_status=%d\n", status);
    r = reinterpret_cast<PFN_cuMemAlloc_v3020>(fn)(&p, bytes);
    std::printf("v2_result=%d\n", int(r));
    if (r == CUDA_SUCCESS) cuMemFree(p);
  }
#if CUDA_VERSION >= 12000
  // And as this header declares it (a direct call into the preloaded export).
  Check(GetProc("cuMemAlloc", &fn, kVersion, CU_GET_PROC_ADDRESS_DEFAULT), "cuGetProcAddress");
  r = reinterpret_cast<PFN_cuMemAlloc_v3020>(fn)(&p, bytes);
  std::printf("v2_header_result=%d\n", int(r));
  if (r == CUDA_SUCCESS) cuMemFree(p);
#endif
  // The per-thread-default-stream flavour of an async allocation.
  Check(GetProc("cuMemAllocAsync", &fn, kVersion, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
        "cuGetProcAddress ptsz");
  r = reinterpret_cast<PFN_cuMemAllocAsync_v11020_ptsz>(fn)(&p, bytes, nullptr);
  std::printf("ptsz_result=%d\n", int(r));
  if (r == CUDA_SUCCESS) {
    cuMemFreeAsync(p, nullptr);
    cuStreamSynchronize(nullptr);
  }
  // The old four-argument cuGetProcAddress, itself fetched through the
  // header's cuGetProcAddress (the new one where the header has it).
  Check(GetProc("cuGetProcAddress", &fn, 11030, 0), "old");
  void* fn2 = nullptr;
  Check(reinterpret_cast<PFN_cuGetProcAddress_v11030>(fn)("cuMemAlloc", &fn2, 11030, 0), "v1");
  r = reinterpret_cast<PFN_cuMemAlloc_v3020>(fn2)(&p, bytes);
  std::printf("v1_result=%d\n", int(r));
  if (r == CUDA_SUCCESS) cuMemFree(p);
  // A pre-3.2 allocator would bypass the limit.
  fn = nullptr;
  r = GetProc("cuMemAlloc", &fn, 2000, 0);
  std::printf("legacy_result=%d\n", int(r));
  return 0;
}

int Dlsym(size_t bytes) {
  Init();
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  auto alloc = reinterpret_cast<PFN_cuMemAlloc_v3020>(dlsym(lib, "cuMemAlloc_v2"));
  CUdeviceptr p = 0;
  CUresult r = alloc(&p, bytes);
  std::printf("dlsym_result=%d\n", int(r));
  if (r == CUDA_SUCCESS) cuMemFree(p);
  alloc = reinterpret_cast<PFN_cuMemAlloc_v3020>(dlvsym(lib, "cuMemAlloc_v2", "ANY"));
  if (alloc == nullptr) alloc = reinterpret_cast<PFN_cuMemAlloc_v3020>(dlsym(lib, "cuMemAlloc_v2"));
  r = alloc(&p, bytes);
  std::printf("dlvsym_result=%d\n", int(r));
  if (r == CUDA_SUCCESS) cuMemFree(p);
  // RTLD_NEXT from the program must still mean "after the program": the
  // first definition after it is the shim's (preloaded) one, the same the
  // program's own reference binds to. Were the lookup made relative to the
  // shim instead, it would skip the shim and return the driver's.
  void* next = dlsym(RTLD_NEXT, "cuMemAlloc_v2");
  std::printf("rtld_next_ok=%d\n", next == reinterpret_cast<void*>(&cuMemAlloc_v2) ? 1 : 0);
  return 0;
}

int ForkAlloc(int n, size_t bytes) {
  int go[2], done[2];
  if (pipe(go) != 0 || pipe(done) != 0) return 2;
  std::vector<pid_t> kids;
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      Init();
      CUdeviceptr p;
      CUresult r = cuMemAlloc(&p, bytes);
      char c = r == CUDA_SUCCESS ? 'y' : 'n';
      (void)!write(done[1], &c, 1);
      (void)!read(go[0], &c, 1);  // Hold until everyone has tried.
      _exit(0);
    }
    kids.push_back(pid);
  }
  int granted = 0;
  for (int i = 0; i < n; ++i) {
    char c;
    if (read(done[0], &c, 1) == 1 && c == 'y') ++granted;
  }
  for (int i = 0; i < n; ++i) (void)!write(go[1], "x", 1);
  for (pid_t k : kids) waitpid(k, nullptr, 0);
  std::printf("granted=%d\n", granted);
  return 0;
}

int Spawn(const char* self, size_t bytes) {
  // Neither this process nor its children inherit anything but the
  // environment: exec'd descendants must find the slice through it.
  int to_a[2], from_a[2];
  if (pipe(to_a) != 0 || pipe(from_a) != 0) return 2;
  pid_t a = fork();
  if (a == 0) {
    dup2(to_a[0], 0);
    dup2(from_a[1], 1);
    execl(self, self, "serve", "alloc", nullptr);
    _exit(127);
  }
  FILE* in = fdopen(from_a[0], "r");
  FILE* out = fdopen(to_a[1], "w");
  char line[256];
  if (fgets(line, sizeof(line), in) == nullptr) return 2;  // ready=1
  std::fprintf(out, "alloc %zu\n", bytes);
  std::fflush(out);
  if (fgets(line, sizeof(line), in) == nullptr) return 2;
  std::printf("first_%s", line);
  std::fflush(stdout);
  pid_t b = fork();
  if (b == 0) {
    std::string arg = std::to_string(bytes);
    execl(self, self, "alloc", "alloc", arg.c_str(), nullptr);
    _exit(127);
  }
  waitpid(b, nullptr, 0);
  std::fprintf(out, "quit\n");
  std::fflush(out);
  waitpid(a, nullptr, 0);
  return 0;
}

using CtxCreateV2 = CUresult (*)(CUcontext*, unsigned int, CUdevice);
using CtxCreateV3 = CUresult (*)(CUcontext*, CUexecAffinityParam*, int, unsigned int, CUdevice);
using PrimaryRetain = CUresult (*)(CUcontext*, CUdevice);

bool IsPrimaryRoute(const std::string& route) { return route == "primary" || route == "runtime"; }

// A context on device 0 by `route` (see the top of the file).
CUresult MakeContext(const std::string& route, CUcontext* ctx) {
  void* fn = nullptr;
  CUresult r = CUDA_SUCCESS;
  if (route == "primary") return cuDevicePrimaryCtxRetain(ctx, 0);
  if (route == "runtime") {
    r = GetProc("cuDevicePrimaryCtxRetain", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT);
    return r != CUDA_SUCCESS ? r : reinterpret_cast<PrimaryRetain>(fn)(ctx, 0);
  }
  if (route == "v2") {
    r = GetProc("cuCtxCreate", &fn, 3020, CU_GET_PROC_ADDRESS_DEFAULT);
    return r != CUDA_SUCCESS ? r : reinterpret_cast<CtxCreateV2>(fn)(ctx, 0, 0);
  }
#if CUDA_VERSION >= 12050
  if (route == "v4") return cuCtxCreate_v4(ctx, nullptr, 0, 0);
#endif
  if (route == "v3" || route == "v4") {
    r = GetProc("cuCtxCreate", &fn, 11040, CU_GET_PROC_ADDRESS_DEFAULT);
    return r != CUDA_SUCCESS ? r : reinterpret_cast<CtxCreateV3>(fn)(ctx, nullptr, 0, 0, 0);
  }
  if (route == "dlsym") {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    fn = lib != nullptr ? dlsym(lib, "cuCtxCreate_v2") : nullptr;
    return fn == nullptr ? CUDA_ERROR_NOT_FOUND : reinterpret_cast<CtxCreateV2>(fn)(ctx, 0, 0);
  }
  std::printf("fatal=unknown context route %s\n", route.c_str());
  std::exit(2);
}

CUresult DropContext(const std::string& route, CUcontext ctx) {
  return IsPrimaryRoute(route) ? cuDevicePrimaryCtxRelease(0) : cuCtxDestroy(ctx);
}

// One process of the context race: ready after cuInit, creates its context
// and allocates in it when told "go", holds both until "quit".
int ContextRace(const std::string& route, size_t bytes) {
  Check(cuInit(0), "cuInit");
  std::printf("ready=1\n");
  std::fflush(stdout);
  std::string word;
  if (!(std::cin >> word) || word != "go") return 2;
  CUcontext ctx = nullptr;
  CUresult made = MakeContext(route, &ctx);
  CUresult alloc = CUDA_ERROR_INVALID_CONTEXT;
  CUdeviceptr p = 0;
  if (made == CUDA_SUCCESS) {
    Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    alloc = cuMemAlloc(&p, bytes);
  }
  std::printf("ctx=%d\nalloc=%d\n", int(made), int(alloc));
  std::fflush(stdout);
  if (!(std::cin >> word) || word != "quit") return 2;
  if (alloc == CUDA_SUCCESS) Check(cuMemFree(p), "cuMemFree");
  if (made == CUDA_SUCCESS) Check(DropContext(route, ctx), "drop");
  return 0;
}

// Context operations one at a time, for checks between them.
int ContextServe() {
  Check(cuInit(0), "cuInit");
  std::vector<std::pair<std::string, CUcontext>> created;
  std::vector<CUdeviceptr> held;
  std::printf("ready=1\n");
  std::fflush(stdout);
  std::string cmd;
  while (std::cin >> cmd) {
    CUresult r = CUDA_SUCCESS;
    if (cmd == "retain") {
      CUcontext ctx = nullptr;
      r = cuDevicePrimaryCtxRetain(&ctx, 0);
      if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(ctx);
    } else if (cmd == "release") {
      r = cuDevicePrimaryCtxRelease(0);
    } else if (cmd == "reset") {
      r = cuDevicePrimaryCtxReset(0);
    } else if (cmd == "create") {
      std::string route;
      std::cin >> route;
      CUcontext ctx = nullptr;
      r = MakeContext(route, &ctx);
      if (r == CUDA_SUCCESS) created.emplace_back(route, ctx);
    } else if (cmd == "destroy") {
      r = CUDA_ERROR_INVALID_CONTEXT;
      if (!created.empty()) {
        r = DropContext(created.back().first, created.back().second);
        created.pop_back();
      }
    } else if (cmd == "badcreate") {
      // Execution affinity the simulated driver does not support: the
      // creation fails after the shim has reserved for it.
      void* fn = nullptr;
      r = GetProc("cuCtxCreate", &fn, 11040, CU_GET_PROC_ADDRESS_DEFAULT);
      if (r == CUDA_SUCCESS) {
        CUexecAffinityParam param{};
        param.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
        param.param.smCount.val = 1;
        CUcontext ctx = nullptr;
        r = reinterpret_cast<CtxCreateV3>(fn)(&ctx, &param, 1, 0, 0);
      }
    } else if (cmd == "alloc") {
      size_t bytes = 0;
      std::cin >> bytes;
      CUdeviceptr p = 0;
      r = cuMemAlloc(&p, bytes);
      if (r == CUDA_SUCCESS) held.push_back(p);
    } else if (cmd == "free") {
      for (CUdeviceptr p : held) Check(cuMemFree(p), "cuMemFree");
      held.clear();
    } else {
      break;
    }
    std::printf("result=%d\n", int(r));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string cmd = argc > 1 ? argv[1] : "";
  auto num = [&](int i) { return argc > i ? std::strtoull(argv[i], nullptr, 10) : 0ull; };
  if (cmd == "info") return Info();
  if (cmd == "nvml") return Nvml();
  if (cmd == "fill" && argc == 4) return Fill(argv[2], num(3));
  if (cmd == "alloc" && argc == 4) return AllocOnce(argv[2], num(3));
  if (cmd == "fill2" && argc == 3) return FillTwoDevices(num(2));
  if (cmd == "serve" && argc == 3) return Serve(argv[2]);
  if (cmd == "race" && argc == 5) return Race(int(num(2)), int(num(3)), num(4));
  if (cmd == "procaddr" && argc == 3) return ProcAddress(num(2));
  if (cmd == "dlsym" && argc == 3) return Dlsym(num(2));
  if (cmd == "forkalloc" && argc == 4) return ForkAlloc(int(num(2)), num(3));
  if (cmd == "spawn" && argc == 3) return Spawn(argv[0], num(2));
  if (cmd == "ctx" && argc == 4) return ContextRace(argv[2], num(3));
  if (cmd == "ctxserve") return ContextServe();
  std::fprintf(stderr, "usage: see the comment at the top of shim_probe.cc\n");
  return 2;
}
