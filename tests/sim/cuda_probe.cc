// A CUDA driver API program run by sim_driver_test against the simulated
// libcuda.so.1. It is written against the real cuda.h and linked like any
// application (the toolkit's stub libcuda.so, or our library, both with the
// soname libcuda.so.1), so it exercises the exported ABI.
//
// Usage: cuda_probe <mode> [args...]. Exit 0: every check passed; otherwise
// the failed check is printed on stderr.

#include "cuda_probe.h"

#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace probe {
// ckpt-target and ckpt-control (cuda_probe_checkpoint.cc).
int CheckpointTarget();
int CheckpointControl();
}  // namespace probe

namespace {

using namespace probe;  // NOLINT: the modes below share its checks.

double Ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}

// Holds `bytes` of device memory until stdin closes; prints "ready".
int Hold(size_t bytes) {
  [[maybe_unused]] Setup s = Init();
  CUdeviceptr p = 0;
  if (bytes > 0) CU(cuMemAlloc(&p, bytes));
  std::printf("ready\n");
  std::fflush(stdout);
  char buf[16];
  while (read(0, buf, sizeof(buf)) > 0) {
  }
  return 0;
}

// Tries to allocate `bytes`; prints the CUresult name.
int TryAlloc(size_t bytes) {
  [[maybe_unused]] Setup s = Init();
  CUdeviceptr p = 0;
  std::printf("%s\n", Name(cuMemAlloc(&p, bytes)));
  size_t free = 0, total = 0;
  CU(cuMemGetInfo(&free, &total));
  std::printf("free %zu total %zu\n", free, total);
  return 0;
}

// Keeps the device busy with 2 ms kernels for `ms` of wall time.
int Saturate(int ms) {
  [[maybe_unused]] Setup s = Init();
  std::printf("ready\n");
  std::fflush(stdout);
  auto start = std::chrono::steady_clock::now();
  while (Ms(start) < ms) {
    for (int i = 0; i < 5; ++i) Sleep(s, 2000, nullptr);
    CU(cuCtxSynchronize());
  }
  std::printf("done\n");
  std::fflush(stdout);
  char buf[16];
  while (read(0, buf, sizeof(buf)) > 0) {
  }
  return 0;
}

// Times copies of `bytes` between buffers already in memory against a host
// memcpy of the same size, interleaved, 5 rounds; prints each one's fastest
// round in ms on one line:
//   memcpy M htod A dtoh B dtod C htod-async D dtoh-async E dtod-async F
int CopyBandwidth(size_t bytes) {
  [[maybe_unused]] Setup s = Init();
  auto* host_a = static_cast<unsigned char*>(std::malloc(bytes));
  auto* host_b = static_cast<unsigned char*>(std::malloc(bytes));
  CHECK(host_a != nullptr && host_b != nullptr);
  for (size_t i = 0; i < bytes; ++i) host_a[i] = static_cast<unsigned char>(i * 7 + (i >> 12));
  std::memset(host_b, 0, bytes);
  CUdeviceptr d1, d2;
  CU(cuMemAlloc(&d1, bytes));
  CU(cuMemAlloc(&d2, bytes));
  CU(cuMemcpyHtoD(d1, host_a, bytes));  // Device memory in memory too, as a GPU's is.
  CU(cuMemcpyDtoD(d2, d1, bytes));
  CUstream st;
  CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  struct Timed {
    const char* name;
    void (*run)(unsigned char*, unsigned char*, CUdeviceptr, CUdeviceptr, size_t, CUstream);
    double best = 1e300;
  } timed[] = {
      {"memcpy", [](unsigned char* a, unsigned char* b, CUdeviceptr, CUdeviceptr, size_t n,
                    CUstream) { std::memcpy(b, a, n); }},
      {"htod", [](unsigned char* a, unsigned char*, CUdeviceptr x, CUdeviceptr, size_t n,
                  CUstream) { CU(cuMemcpyHtoD(x, a, n)); }},
      {"dtoh", [](unsigned char*, unsigned char* b, CUdeviceptr, CUdeviceptr y, size_t n,
                  CUstream) { CU(cuMemcpyDtoH(b, y, n)); }},
      {"dtod", [](unsigned char*, unsigned char*, CUdeviceptr x, CUdeviceptr y, size_t n,
                  CUstream) { CU(cuMemcpyDtoD(y, x, n)); }},
      {"htod-async",
       [](unsigned char* a, unsigned char*, CUdeviceptr x, CUdeviceptr, size_t n, CUstream t) {
         CU(cuMemcpyHtoDAsync(x, a, n, t));
         CU(cuStreamSynchronize(t));
       }},
      {"dtoh-async",
       [](unsigned char*, unsigned char* b, CUdeviceptr, CUdeviceptr y, size_t n, CUstream t) {
         CU(cuMemcpyDtoHAsync(b, y, n, t));
         CU(cuStreamSynchronize(t));
       }},
      {"dtod-async",
       [](unsigned char*, unsigned char*, CUdeviceptr x, CUdeviceptr y, size_t n, CUstream t) {
         CU(cuMemcpyDtoDAsync(y, x, n, t));
         CU(cuStreamSynchronize(t));
       }},
  };
  for (int round = 0; round < 5; ++round) {
    for (Timed& t : timed) {
      auto t0 = std::chrono::steady_clock::now();
      t.run(host_a, host_b, d1, d2, bytes, st);
      t.best = std::min(t.best, Ms(t0));
    }
  }
  CHECK(std::memcmp(host_a, host_b, bytes) == 0);
  for (const Timed& t : timed) std::printf("%s%s %.3f", &t == timed ? "" : " ", t.name, t.best);
  std::printf("\n");
  return 0;
}

int Copies() {
  [[maybe_unused]] Setup s = Init();
  const size_t n = 1 << 20;
  std::vector<unsigned char> src(n), dst(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 7 + 3);
  CUdeviceptr a, b;
  CU(cuMemAlloc(&a, n));
  CU(cuMemAlloc(&b, n));
  CU(cuMemcpyHtoD(a, src.data(), n));
  CU(cuMemcpyDtoD(b, a, n));
  CU(cuMemcpyDtoH(dst.data(), b, n));
  CHECK(dst == src);
  // Async forms on a stream.
  CUstream st;
  CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  std::fill(dst.begin(), dst.end(), 0);
  CU(cuMemsetD8Async(b, 0, n, st));
  CU(cuMemcpyHtoDAsync(b, src.data(), n / 2, st));
  CU(cuMemcpyDtoHAsync(dst.data(), b, n, st));
  CU(cuStreamSynchronize(st));
  CHECK(std::memcmp(dst.data(), src.data(), n / 2) == 0);
  CHECK(dst[n / 2] == 0 && dst[n - 1] == 0);
  // Memsets.
  CU(cuMemsetD32(a, 0xdeadbeefu, n / 4));
  unsigned int word = 0;
  CU(cuMemcpyDtoH(&word, a + n - 4, 4));
  CHECK(word == 0xdeadbeefu);
  CU_IS(cuMemsetD32(a + 1, 0, 4), CUDA_ERROR_INVALID_VALUE);
  // Out-of-range copies are refused, not crashes.
  CU_IS(cuMemcpyHtoD(a + n - 8, src.data(), 16), CUDA_ERROR_INVALID_VALUE);
  CU_IS(cuMemcpyDtoH(dst.data(), 0x1000, 16), CUDA_ERROR_INVALID_VALUE);
  // Pitch, managed and pool memory.
  CUdeviceptr pitched;
  size_t pitch = 0;
  CU(cuMemAllocPitch(&pitched, &pitch, 1000, 10, 4));
  CHECK(pitch >= 1000 && pitch % 512 == 0);
  CU(cuMemcpyHtoD(pitched + pitch * 9, src.data(), 1000));
  CUdeviceptr managed;
  CU(cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL));
  reinterpret_cast<volatile int*>(managed)[0] = 42;  // Host-accessible, as on the real driver.
  int back = 0;
  CU(cuMemcpyDtoH(&back, managed, sizeof(back)));
  CHECK(back == 42);
  CUdeviceptr pooled;
  CU(cuMemAllocAsync(&pooled, n, st));
  CU(cuMemcpyHtoDAsync(pooled, src.data(), n, st));
  CU(cuMemcpyDtoHAsync(dst.data(), pooled, n, st));
  CU(cuMemFreeAsync(pooled, st));
  CU(cuStreamSynchronize(st));
  CHECK(dst == src);
  // Virtual memory management: reserve, create, map, set access, copy.
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t gran = 0;
  CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CHECK(gran > 0);
  CUmemGenericAllocationHandle h;
  CU(cuMemCreate(&h, gran, &prop, 0));
  CUdeviceptr va;
  CU(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
  CU(cuMemMap(va, gran, 0, h, 0));
  CU_IS(cuMemcpyHtoD(va, src.data(), 64), CUDA_ERROR_INVALID_VALUE);  // No access yet.
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(va, gran, &access, 1));
  CU(cuMemcpyHtoD(va, src.data(), n < gran ? n : gran));
  std::fill(dst.begin(), dst.end(), 0);
  CU(cuMemcpyDtoH(dst.data(), va, n < gran ? n : gran));
  CHECK(std::memcmp(dst.data(), src.data(), n < gran ? n : gran) == 0);
  CU(cuMemUnmap(va, gran));
  CU(cuMemRelease(h));
  CU(cuMemAddressFree(va, 2 * gran));
  // Arrays take device memory.
  size_t free0, free1, total;
  CU(cuMemGetInfo(&free0, &total));
  CUarray arr;
  CUDA_ARRAY_DESCRIPTOR desc{};
  desc.Width = 1024;
  desc.Height = 1024;
  desc.Format = CU_AD_FORMAT_FLOAT;
  desc.NumChannels = 4;
  CU(cuArrayCreate(&arr, &desc));
  CU(cuMemGetInfo(&free1, &total));
  CHECK(free0 - free1 >= 16u << 20);
  CU(cuArrayDestroy(arr));
  CU(cuMemFree(a));
  CU(cuMemFree(b));
  CU_IS(cuMemFree(a), CUDA_ERROR_INVALID_VALUE);
  CU(cuStreamDestroy(st));
  return 0;
}

int StreamOrder() {
  [[maybe_unused]] Setup s = Init();
  CUstream st;
  CU(cuStreamCreate(&st, 0));
  CUevent e0, e1;
  CU(cuEventCreate(&e0, 0));
  CU(cuEventCreate(&e1, 0));
  CUdeviceptr d;
  CU(cuMemAlloc(&d, 4096));
  CU(cuMemsetD32(d, 1, 1024));
  unsigned int host = 0;
  auto start = std::chrono::steady_clock::now();
  CU(cuEventRecord(e0, st));
  Sleep(s, 30000, st);  // 30 ms.
  CU(cuMemsetD32Async(d, 7, 1024, st));
  CU(cuEventRecord(e1, st));
  CU(cuMemcpyDtoHAsync(&host, d, 4, st));
  // Launches are asynchronous: nothing has run yet.
  CHECK(Ms(start) < 25);
  CU_IS(cuStreamQuery(st), CUDA_ERROR_NOT_READY);
  CU_IS(cuEventQuery(e1), CUDA_ERROR_NOT_READY);
  float ms = 0;
  CU_IS(cuEventElapsedTime(&ms, e0, e1), CUDA_ERROR_NOT_READY);
  CU(cuStreamSynchronize(st));
  CHECK(Ms(start) >= 29);
  CHECK(host == 7);  // The memset ran after the kernel, the copy after both.
  CU(cuEventElapsedTime(&ms, e0, e1));
  if (!(ms >= 29.9f && ms < 45.f)) std::fprintf(stderr, "elapsed %f\n", ms);
  CHECK(ms >= 29.9f && ms < 45.f);
  // A second stream waits for an event of the first.
  CUstream st2;
  CU(cuStreamCreate(&st2, CU_STREAM_NON_BLOCKING));
  Sleep(s, 10000, st);
  CU(cuEventRecord(e0, st));
  CU(cuStreamWaitEvent(st2, e0, 0));
  CU(cuMemsetD32Async(d, 9, 1, st2));
  CU(cuStreamSynchronize(st2));
  CU(cuEventQuery(e0));
  CU(cuMemcpyDtoH(&host, d, 4));
  CHECK(host == 9);
  // Many tiny kernels add up (absolute deadlines, no per-kernel drift).
  CU(cuEventRecord(e0, st));
  for (int i = 0; i < 2000; ++i) Sleep(s, 10, st);
  CU(cuEventRecord(e1, st));
  CU(cuEventSynchronize(e1));
  CU(cuEventElapsedTime(&ms, e0, e1));
  CHECK(ms >= 19.9f && ms < 35.f);
  // Host functions run in order with the rest.
  static int order[3];
  static int next = 0;
  CU(cuLaunchHostFunc(
      st, [](void*) { order[next++] = 1; }, nullptr));
  Sleep(s, 1000, st);
  CU(cuLaunchHostFunc(
      st, [](void*) { order[next++] = 2; }, nullptr));
  CU(cuCtxSynchronize());
  CHECK(next == 2 && order[0] == 1 && order[1] == 2);
  // The ordinary kernel costs launch + waves.
  CU(cuEventRecord(e0, st));
  CU(cuLaunchKernel(s.saxpy, 100000, 1, 1, 256, 1, 1, 0, st, nullptr, nullptr));
  CU(cuEventRecord(e1, st));
  CU(cuEventSynchronize(e1));
  CU(cuEventElapsedTime(&ms, e0, e1));
  CHECK(ms > 0.01f && ms < 1.f);
  CU(cuEventDestroy(e0));
  CU(cuEventDestroy(e1));
  CU(cuStreamDestroy(st));
  CU(cuStreamDestroy(st2));
  return 0;
}

int Graphs() {
  [[maybe_unused]] Setup s = Init();
  CUstream st;
  CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  // Explicit kernel nodes: a -> b, a -> c.
  CUgraph g;
  CU(cuGraphCreate(&g, 0));
  unsigned us = 5000;
  void* args[] = {&us};
  CUDA_KERNEL_NODE_PARAMS kp{};
  kp.func = s.sleep;
  kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
  kp.blockDimX = 32;
  kp.blockDimY = kp.blockDimZ = 1;
  kp.kernelParams = args;
  CUgraphNode a, b, c;
  CU(cuGraphAddKernelNode(&a, g, nullptr, 0, &kp));
  CU(cuGraphAddKernelNode(&b, g, &a, 1, &kp));
  CU(cuGraphAddKernelNode(&c, g, &a, 1, &kp));
  size_t count = 0;
  CU(cuGraphGetNodes(g, nullptr, &count));
  CHECK(count == 3);
  CUgraphExec exec;
  CU(cuGraphInstantiateWithFlags(&exec, g, 0));
  CUevent e0, e1;
  CU(cuEventCreate(&e0, 0));
  CU(cuEventCreate(&e1, 0));
  CU(cuEventRecord(e0, st));
  CU(cuGraphLaunch(exec, st));
  CU(cuEventRecord(e1, st));
  CU(cuStreamSynchronize(st));
  float ms = 0;
  CU(cuEventElapsedTime(&ms, e0, e1));
  CHECK(ms >= 14.9f && ms < 30.f);  // Three 5 ms kernels ran (upper bound: a busy CI machine).
  // Stream capture records instead of running.
  CUdeviceptr d;
  CU(cuMemAlloc(&d, 64));
  CU(cuMemsetD32(d, 0, 16));
  CU(cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus status;
  CU(cuStreamIsCapturing(st, &status));
  CHECK(status == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  Sleep(s, 4000, st);
  CU(cuMemsetD32Async(d, 5, 16, st));
  Sleep(s, 4000, st);
  CU_IS(cuStreamSynchronize(st), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph captured = nullptr;
  CU_IS(cuStreamEndCapture(st, &captured), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CU(cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_GLOBAL));
  Sleep(s, 4000, st);
  CU(cuMemsetD32Async(d, 5, 16, st));
  Sleep(s, 4000, st);
  CU(cuStreamEndCapture(st, &captured));
  unsigned int host = 1;
  CU(cuMemcpyDtoH(&host, d, 4));
  CHECK(host == 0);  // Nothing ran during capture.
  CU(cuGraphGetNodes(captured, nullptr, &count));
  CHECK(count == 3);
  CUgraphExec exec2;
  CU(cuGraphInstantiateWithFlags(&exec2, captured, 0));
  CU(cuEventRecord(e0, st));
  CU(cuGraphLaunch(exec2, st));
  CU(cuEventRecord(e1, st));
  CU(cuStreamSynchronize(st));
  CU(cuEventElapsedTime(&ms, e0, e1));
  CHECK(ms >= 7.9f && ms < 23.f);
  CU(cuMemcpyDtoH(&host, d, 4));
  CHECK(host == 5);
  CU(cuGraphExecDestroy(exec));
  CU(cuGraphExecDestroy(exec2));
  CU(cuGraphDestroy(g));
  CU(cuGraphDestroy(captured));
  return 0;
}

int Errors() {
  CUdeviceptr p;
  int n = 0;
  CU_IS(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  CU_IS(cuMemAlloc(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
  CU_IS(cuInit(1), CUDA_ERROR_INVALID_VALUE);
  CU(cuInit(0));
  CU(cuDeviceGetCount(&n));
  CHECK(n == 2);
  CUdevice dev;
  CU_IS(cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
  CU_IS(cuMemAlloc(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext ctx, ctx2, cur;
#if CUDA_VERSION >= 12050  // cuCtxCreate is _v4, with a parameters argument.
  CU(cuCtxCreate(&ctx, nullptr, 0, 1));
#else
  CU(cuCtxCreate(&ctx, 0, 1));
#endif
  CU(cuCtxGetDevice(&dev));
  CHECK(dev == 1);
  CU_IS(cuMemFree(0xdead0000), CUDA_ERROR_INVALID_VALUE);
  CU_IS(cuMemAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
  CU_IS(cuStreamSynchronize(reinterpret_cast<CUstream>(0x1234)), CUDA_ERROR_INVALID_HANDLE);
  CU_IS(cuEventQuery(reinterpret_cast<CUevent>(0x1234)), CUDA_ERROR_INVALID_HANDLE);
  CU_IS(cuCtxPushCurrent(reinterpret_cast<CUcontext>(0x1234)), CUDA_ERROR_INVALID_CONTEXT);
  CUmodule mod;
  CUfunction f;
  CU(cuModuleLoadData(&mod, kPtx));
  CU_IS(cuModuleGetFunction(&f, mod, "missing"), CUDA_ERROR_NOT_FOUND);
  CU(cuModuleGetFunction(&f, mod, "saxpy"));
  CU_IS(cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, nullptr, nullptr, nullptr),
        CUDA_ERROR_INVALID_VALUE);
  CU_IS(cuLaunchCooperativeKernel(f, 1000000, 1, 1, 1024, 1, 1, 0, nullptr, nullptr),
        CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  // Context stack.
#if CUDA_VERSION >= 12050
  CU(cuCtxCreate(&ctx2, nullptr, 0, 0));
#else
  CU(cuCtxCreate(&ctx2, 0, 0));
#endif
  CU(cuCtxGetCurrent(&cur));
  CHECK(cur == ctx2);
  CU(cuCtxPopCurrent(&cur));
  CHECK(cur == ctx2);
  CU(cuCtxGetCurrent(&cur));
  CHECK(cur == ctx);
  CU(cuCtxDestroy(ctx2));
  CU_IS(cuCtxPushCurrent(ctx2), CUDA_ERROR_INVALID_CONTEXT);
  const char* name = nullptr;
  CU(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &name));
  CHECK(std::strcmp(name, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
  CU(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &name));
  CHECK(std::strcmp(name, "out of memory") == 0);
  CU_IS(cuGetErrorName(static_cast<CUresult>(12345), &name), CUDA_ERROR_INVALID_VALUE);
  int version = 0;
  CU(cuDriverGetVersion(&version));
  CHECK(version == CUDA_VERSION);
  char bus[32];
  CU(cuDeviceGetPCIBusId(bus, sizeof(bus), 1));
  CU(cuDeviceGetByPCIBusId(&dev, bus));
  CHECK(dev == 1);
  int sms = 0;
  CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1));
  CHECK(sms == 58);  // L4.
  CU(cuCtxDestroy(ctx));
  return 0;
}

int Devices() {
  CU(cuInit(0));
  int n = 0;
  CU(cuDeviceGetCount(&n));
  for (int i = 0; i < n; ++i) {
    char name[128];
    CUuuid uuid;
    size_t mem = 0;
    CU(cuDeviceGetName(name, sizeof(name), i));
    CU(cuDeviceGetUuid(&uuid, i));
    CU(cuDeviceTotalMem(&mem, i));
    std::printf("%d %s %zu\n", i, name, mem);
  }
  return 0;
}

// Every entry point of entry_points.def (compiled in, with its guards for
// the cuda.h we build against) is reachable through cuGetProcAddress and is
// the exported function itself.
struct DefEntry {
  const char* name;
  int version;
  bool ptds;
  const char* symbol;
};
const DefEntry kDefEntries[] = {
#define CU_ENTRY(name, version, symbol) {#name, version, false, #symbol},
#define CU_PTDS(name, version, symbol) {#name, version, true, #symbol},
#include "sim/driver/entry_points.def"
#undef CU_ENTRY
#undef CU_PTDS
};

#if CUDA_VERSION >= 12000
using ProcStatus = CUdriverProcAddressQueryResult;
#else
// Headers before 12.0 have no cuGetProcAddress_v2 and no status; the
// checks below then see SUCCESS or this.
enum ProcStatus { CU_GET_PROC_ADDRESS_SUCCESS, CU_GET_PROC_ADDRESS_NO_STATUS };
#endif

int ProcAddress() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  CHECK(lib != nullptr);
#if CUDA_VERSION >= 12000
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, ProcStatus*);
  auto get = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  CHECK(get != nullptr);
#else
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t);
  static auto v1 = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress"));
  CHECK(v1 != nullptr);
  auto get = [](const char* name, void** pfn, int version, cuuint64_t flags, ProcStatus* status) {
    CUresult r = v1(name, pfn, version, flags);
    *status = r == CUDA_SUCCESS ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_NO_STATUS;
    return r;
  };
#endif
  int checked = 0;
  for (const DefEntry& e : kDefEntries) {
    void* pfn = nullptr;
    ProcStatus status;
    CUresult r = get(
        e.name, &pfn, e.version,
        e.ptds ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_LEGACY_STREAM,
        &status);
    void* exported = dlsym(lib, e.symbol);
    if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || pfn == nullptr ||
        pfn != exported) {
      std::fprintf(stderr, "%s@%d (%s): %s, pfn %p, exported %p\n", e.name, e.version, e.symbol,
                   Name(r), pfn, exported);
      return 1;
    }
    ++checked;
  }
  CHECK(checked > 150);
  void* pfn = nullptr;
  ProcStatus status;
  CU(get("cuMemAlloc", &pfn, 12000, 0, &status));
  CHECK(pfn == dlsym(lib, "cuMemAlloc_v2"));
  CU(get("cuLaunchKernel", &pfn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
  CHECK(pfn == dlsym(lib, "cuLaunchKernel_ptsz"));
  CU(get("cuCtxCreate", &pfn, 12000, 0, &status));
  CHECK(pfn == dlsym(lib, "cuCtxCreate_v3"));
  CU_IS(get("cuMemAllocAsync", &pfn, 11000, 0, &status), CUDA_ERROR_NOT_FOUND);
  CHECK(pfn == nullptr);
#if CUDA_VERSION >= 12000
  CHECK(status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
#endif
  CU_IS(get("cuNoSuchFunction", &pfn, 13000, 0, &status), CUDA_ERROR_NOT_FOUND);
#if CUDA_VERSION >= 12000
  CHECK(status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
#endif
  CU_IS(get("cuInit", &pfn, 13000, 8, &status), CUDA_ERROR_INVALID_VALUE);
  // Functions reached this way behave like the exported ones.
  using Init = CUresult (*)(unsigned);
  using Count = CUresult (*)(int*);
  using Retain = CUresult (*)(CUcontext*, CUdevice);
  using SetCur = CUresult (*)(CUcontext);
  using Alloc = CUresult (*)(CUdeviceptr*, size_t);
  using Info = CUresult (*)(size_t*, size_t*);
  using Free = CUresult (*)(CUdeviceptr);
  void *init, *count, *retain, *setcur, *alloc, *info, *fr;
  CU(get("cuInit", &init, 13000, 0, &status));
  CU(get("cuDeviceGetCount", &count, 13000, 0, &status));
  CU(get("cuDevicePrimaryCtxRetain", &retain, 13000, 0, &status));
  CU(get("cuCtxSetCurrent", &setcur, 13000, 0, &status));
  CU(get("cuMemAlloc", &alloc, 13000, 0, &status));
  CU(get("cuMemGetInfo", &info, 13000, 0, &status));
  CU(get("cuMemFree", &fr, 13000, 0, &status));
  int n = 0;
  CU_IS(reinterpret_cast<Count>(count)(&n), CUDA_ERROR_NOT_INITIALIZED);
  CU(reinterpret_cast<Init>(init)(0));
  CU(reinterpret_cast<Count>(count)(&n));
  CHECK(n == 1);
  CUcontext ctx;
  CU(reinterpret_cast<Retain>(retain)(&ctx, 0));
  CU(reinterpret_cast<SetCur>(setcur)(ctx));
  size_t free0, free1, total;
  CU(reinterpret_cast<Info>(info)(&free0, &total));
  CUdeviceptr p;
  CU(reinterpret_cast<Alloc>(alloc)(&p, 64 << 20));
  CU(cuMemGetInfo(&free1, &total));
  CHECK(free0 - free1 == (64u << 20));
  CU(reinterpret_cast<Free>(fr)(p));
  CU_IS(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
  return 0;
}

// Calls entry points that the simulator implements on top of others
// (run with interpose_preload): none may reach the interposed symbols.
int Interposition() {
  [[maybe_unused]] Setup s = Init();
  CUstream st;
  CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  CUevent e0, e1;
  CU(cuEventCreate(&e0, 0));
  CU(cuEventCreate(&e1, 0));
  CU(cuEventRecord(e0, st));
  CU(cuEventRecord(e1, st));
  CU(cuEventSynchronize(e1));
  float ms = 0;
  using Elapsed = CUresult (*)(float*, CUevent, CUevent);
  void* legacy = dlsym(RTLD_DEFAULT, "cuEventElapsedTime");  // The v1 name, not the macro.
  CHECK(legacy != nullptr);
  CU(reinterpret_cast<Elapsed>(legacy)(&ms, e0, e1));
  using TotalMem = CUresult (*)(unsigned int*, CUdevice);
  unsigned int mem32 = 0;
  CU(reinterpret_cast<TotalMem>(dlsym(RTLD_DEFAULT, "cuDeviceTotalMem"))(&mem32, 0));
  void* host = nullptr;
  CU(cuMemAllocHost(&host, 4096));
  CU(cuMemFreeHost(host));
  using Begin = CUresult (*)(CUstream);
  CU(reinterpret_cast<Begin>(dlsym(RTLD_DEFAULT, "cuStreamBeginCapture"))(st));
  CUgraph g;
  CU(cuStreamEndCapture(st, &g));
  return 0;
}

// --- Checkpoint and restore (sim_checkpoint_test.cc) ---

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::string mode = argv[1];
  if (mode == "hold" && argc == 3) return Hold(std::strtoull(argv[2], nullptr, 10));
  if (mode == "try-alloc" && argc == 3) return TryAlloc(std::strtoull(argv[2], nullptr, 10));
  if (mode == "saturate" && argc == 3) return Saturate(std::atoi(argv[2]));
  if (mode == "copies") return Copies();
  if (mode == "copy-bandwidth" && argc == 3) {
    return CopyBandwidth(std::strtoull(argv[2], nullptr, 10));
  }
  if (mode == "stream-order") return StreamOrder();
  if (mode == "graphs") return Graphs();
  if (mode == "errors") return Errors();
  if (mode == "devices") return Devices();
  if (mode == "interposition") return Interposition();
  if (mode == "proc-address") return ProcAddress();
  if (mode == "ckpt-target") return CheckpointTarget();
#if CUDA_VERSION >= 12080
  if (mode == "ckpt-control") return CheckpointControl();
#endif
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
