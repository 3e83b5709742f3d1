// gpuslice-attacker alloc / setsid-hold / work: GPU use through the CUDA
// driver API (the simulated driver in the suite, NVIDIA's on a real GPU),
// under the shim or without it, as the environment decides. Each writes
// timestamped lines to its --out file so the test can tell when it got
// memory and how long it kept it:
//   start pid=P at=MS
//   alloc ok bytes=N at=MS        |  alloc refused CUDA_ERROR_... at=MS
//   alive at=MS                   (every 50 ms while holding)
//   p at=MS kernels=K             (work: every 100 ms)
//   done ...

#include <cuda.h>
#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <type_traits>

#include "attacker.h"
#include "cli/demo/sleep_kernel.h"

namespace gpuslice::security {
namespace {

std::string Name(CUresult r) {
  const char* name = nullptr;
  if (cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) return std::to_string(int(r));
  return name;
}

// cuInit + the primary context of `device`; exits 1 (after a line in `out`)
// when the driver refuses.
void InitContext(int device, const std::string& out) {
  CUresult r = cuInit(0);
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (r == CUDA_SUCCESS) r = cuDeviceGet(&dev, device);
  if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&ctx, dev);
  if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(ctx);
  if (r != CUDA_SUCCESS) {
    AppendLine(out, "init failed " + Name(r) + " at=" + std::to_string(NowMs()));
    std::exit(1);
  }
}

// The driver API as `work` uses it: the process's own entry points (through
// the shim when it is preloaded), or those of a private copy of the same
// library that dlmopen loaded into a new link-map namespace. Nothing
// preloaded into the process is in that namespace, so the copy's functions
// are the driver's own and its launches pass no gate of the shim (a 20%
// slice can take 62.9% of the GPU that way).
struct Driver {
  decltype(&cuInit) Init = &cuInit;
  decltype(&cuDeviceGet) DeviceGet = &cuDeviceGet;
  decltype(&cuDevicePrimaryCtxRetain) PrimaryCtxRetain = &cuDevicePrimaryCtxRetain;
  decltype(&cuCtxSetCurrent) CtxSetCurrent = &cuCtxSetCurrent;
  decltype(&cuMemAlloc) MemAlloc = &cuMemAlloc;
  decltype(&cuMemFree) MemFree = &cuMemFree;
  decltype(&cuModuleLoadData) ModuleLoadData = &cuModuleLoadData;
  decltype(&cuModuleGetFunction) ModuleGetFunction = &cuModuleGetFunction;
  decltype(&cuStreamCreate) StreamCreate = &cuStreamCreate;
  decltype(&cuLaunchKernel) LaunchKernel = &cuLaunchKernel;
  decltype(&cuStreamSynchronize) StreamSynchronize = &cuStreamSynchronize;
};

// The symbol a cuda.h name stands for (cuMemAlloc is cuMemAlloc_v2).
#define GPUSLICE_ATTACK_STR2(x) #x
#define GPUSLICE_ATTACK_STR(x) GPUSLICE_ATTACK_STR2(x)

// Fills `d` from a private copy of the libcuda.so.1 this process linked;
// "" on success, else what failed.
std::string LoadPrivateDriver(Driver* d) {
  void* own = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (own == nullptr) return "libcuda.so.1 is not loaded";
  struct link_map* map = nullptr;
  if (dlinfo(own, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) {
    return "no path for libcuda.so.1";
  }
  const std::string path = map->l_name;
  void* copy = dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (copy == nullptr) return "dlmopen " + path + ": " + dlerror();
  std::string missing;
  auto get = [&](auto& fn, const char* name) {
    void* sym = dlsym(copy, name);
    if (sym == nullptr) {
      missing += std::string(" ") + name;
      return;
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(sym);
  };
  get(d->Init, GPUSLICE_ATTACK_STR(cuInit));
  get(d->DeviceGet, GPUSLICE_ATTACK_STR(cuDeviceGet));
  get(d->PrimaryCtxRetain, GPUSLICE_ATTACK_STR(cuDevicePrimaryCtxRetain));
  get(d->CtxSetCurrent, GPUSLICE_ATTACK_STR(cuCtxSetCurrent));
  get(d->MemAlloc, GPUSLICE_ATTACK_STR(cuMemAlloc));
  get(d->MemFree, GPUSLICE_ATTACK_STR(cuMemFree));
  get(d->ModuleLoadData, GPUSLICE_ATTACK_STR(cuModuleLoadData));
  get(d->ModuleGetFunction, GPUSLICE_ATTACK_STR(cuModuleGetFunction));
  get(d->StreamCreate, GPUSLICE_ATTACK_STR(cuStreamCreate));
  get(d->LaunchKernel, GPUSLICE_ATTACK_STR(cuLaunchKernel));
  get(d->StreamSynchronize, GPUSLICE_ATTACK_STR(cuStreamSynchronize));
  return missing.empty() ? "" : "missing in the copy:" + missing;
}

void Hold(double seconds, const std::string& out) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    AppendLine(out, "alive at=" + std::to_string(NowMs()));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

int Alloc(const Flags& f) {
  const std::string out = f.Get("out");
  const uint64_t bytes = f.GetBytes("bytes", 1ull << 30);
  AppendLine(out, "start pid=" + std::to_string(getpid()) + " at=" + std::to_string(NowMs()) +
                      " preload=" + (getenv("LD_PRELOAD") ? "yes" : "no"));
  InitContext(static_cast<int>(f.GetDouble("device", 0)), out);
  CUdeviceptr p = 0;
  CUresult r = cuMemAlloc(&p, bytes);
  if (r != CUDA_SUCCESS) {
    AppendLine(out, "alloc refused " + Name(r) + " at=" + std::to_string(NowMs()));
    return r == CUDA_ERROR_OUT_OF_MEMORY ? 3 : 1;
  }
  AppendLine(out, "alloc ok bytes=" + std::to_string(bytes) + " at=" + std::to_string(NowMs()));
  if (f.Has("then-wait-file")) {
    // Its next CUDA call once the test says so (after the daemon suspended
    // it: resume on demand), timed.
    AppendLine(out, "waiting at=" + std::to_string(NowMs()));
    if (!WaitForFile(f.Get("then-wait-file"), 600)) Die("no " + f.Get("then-wait-file"));
    const int64_t t0 = NowMs();
    CUdeviceptr q = 0;
    r = cuMemAlloc(&q, f.GetBytes("then-bytes", 1ull << 20));
    AppendLine(out, std::string(r == CUDA_SUCCESS ? "again ok" : "again refused " + Name(r)) +
                        " waited_ms=" + std::to_string(NowMs() - t0) +
                        " at=" + std::to_string(NowMs()));
  }
  Hold(f.GetDouble("hold", 10), out);
  cuMemFree(p);
  AppendLine(out, "done at=" + std::to_string(NowMs()));
  return 0;
}

// The job's leader forks a child that leaves the job's session and process
// group (and, with --double-fork, is reparented as a daemon would be), then
// holds device memory; the leader exits as soon as the escapee holds it, so
// the job looks finished to anything that watches only its process group.
int SetsidHold(const Flags& f) {
  const std::string out = f.Get("out");
  if (out.empty()) Die("setsid-hold needs --out");
  std::vector<std::string> args = {
      "/proc/self/exe",    "alloc", "--bytes", f.Get("bytes", "1GiB"), "--hold",
      f.Get("hold", "60"), "--out", out};
  pid_t child = fork();
  if (child < 0) Die("fork failed");
  if (child == 0) {
    if (setsid() < 0) _exit(120);
    if (f.Has("double-fork")) {
      pid_t grandchild = fork();
      if (grandchild != 0) _exit(grandchild < 0 ? 121 : 0);
    }
    if (f.Has("unset-preload")) unsetenv("LD_PRELOAD");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  if (f.Has("double-fork")) waitpid(child, nullptr, 0);
  AppendLine(out,
             "leader pid=" + std::to_string(getpid()) + " waits at=" + std::to_string(NowMs()));
  // Leave once the escapee holds its memory (or gave up).
  for (int i = 0; i < 600; ++i) {
    std::string seen;
    FILE* in = std::fopen(out.c_str(), "r");
    if (in != nullptr) {
      char line[512];
      while (std::fgets(line, sizeof(line), in)) seen += line;
      std::fclose(in);
    }
    if (seen.find("alloc ok") != std::string::npos ||
        seen.find("alloc refused") != std::string::npos ||
        seen.find("init failed") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  AppendLine(out, "leader exits at=" + std::to_string(NowMs()));
  return 0;
}

// The N processes of a job that skip the shim (50 of them, each with a
// context and 200 MiB, can hold 24.4 GiB in a 1 GiB slice). The leader
// forks them, lets them go together, and writes "alive n=K" every 50 ms
// while K of them live; each writes "alloc ok pid=P" once it holds its
// memory. Run it without the shim (env -u LD_PRELOAD) for the attack.
int Swarm(const Flags& f) {
  const std::string out = f.Get("out");
  if (out.empty()) Die("swarm needs --out");
  const int procs = static_cast<int>(f.GetDouble("procs", 50));
  const uint64_t bytes = f.GetBytes("bytes", 200ull << 20);
  const double hold = f.GetDouble("hold", 10);
  const int device = static_cast<int>(f.GetDouble("device", 0));
  AppendLine(out, "start pid=" + std::to_string(getpid()) + " procs=" + std::to_string(procs) +
                      " at=" + std::to_string(NowMs()));
  int go[2];
  if (pipe(go) != 0) Die("pipe failed");
  std::vector<pid_t> children;
  for (int i = 0; i < procs; ++i) {
    pid_t child = fork();
    if (child < 0) Die("fork failed");
    if (child == 0) {
      close(go[1]);
      char c;
      while (read(go[0], &c, 1) > 0) {
      }
      InitContext(device, out);
      CUdeviceptr p = 0;
      CUresult r = cuMemAlloc(&p, bytes);
      if (r != CUDA_SUCCESS) {
        AppendLine(out, "alloc refused " + Name(r) + " pid=" + std::to_string(getpid()) +
                            " at=" + std::to_string(NowMs()));
        _exit(3);
      }
      AppendLine(out, "alloc ok pid=" + std::to_string(getpid()) +
                          " bytes=" + std::to_string(bytes) + " at=" + std::to_string(NowMs()));
      std::this_thread::sleep_for(std::chrono::duration<double>(hold));
      _exit(0);
    }
    children.push_back(child);
  }
  close(go[0]);
  close(go[1]);  // Go, all together.
  AppendLine(out, "go at=" + std::to_string(NowMs()));
  size_t alive = children.size();
  while (alive > 0) {
    for (pid_t& c : children) {
      if (c > 0 && waitpid(c, nullptr, WNOHANG) == c) {
        c = -1;
        --alive;
      }
    }
    AppendLine(out, "alive n=" + std::to_string(alive) + " at=" + std::to_string(NowMs()));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  AppendLine(out, "done at=" + std::to_string(NowMs()));
  return 0;
}

int Work(const Flags& f) {
  const std::string out = f.Get("out");
  const unsigned kernel_us = static_cast<unsigned>(f.GetDouble("kernel-us", 200));
  const double seconds = f.GetDouble("seconds", 3);
  AppendLine(out, "start pid=" + std::to_string(getpid()) + " at=" + std::to_string(NowMs()));
  Driver d;
  if (f.Has("private-driver")) {
    const std::string error = LoadPrivateDriver(&d);
    if (!error.empty()) {
      AppendLine(out, "private driver failed: " + error);
      return 1;
    }
    AppendLine(out, "private driver at=" + std::to_string(NowMs()));
  }
  const int device = static_cast<int>(f.GetDouble("device", 0));
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUresult r = d.Init(0);
  if (r == CUDA_SUCCESS) r = d.DeviceGet(&dev, device);
  if (r == CUDA_SUCCESS) r = d.PrimaryCtxRetain(&ctx, dev);
  if (r == CUDA_SUCCESS) r = d.CtxSetCurrent(ctx);
  if (r != CUDA_SUCCESS) {
    AppendLine(out, "init failed " + std::to_string(int(r)) + " at=" + std::to_string(NowMs()));
    return 1;
  }
  CUdeviceptr buf = 0;
  if (f.Has("mem") && d.MemAlloc(&buf, f.GetBytes("mem", 0)) != CUDA_SUCCESS) {
    AppendLine(out, "alloc refused at=" + std::to_string(NowMs()));
    return 3;
  }
  CUmodule mod;
  CUfunction fn;
  CUstream stream;
  r = d.ModuleLoadData(&mod, cli::kSleepKernelPtx);
  if (r == CUDA_SUCCESS) r = d.ModuleGetFunction(&fn, mod, "sim_sleep_us");
  if (r == CUDA_SUCCESS) r = d.StreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  if (r != CUDA_SUCCESS) {
    AppendLine(out, "setup failed " + std::to_string(int(r)));
    return 1;
  }
  if (f.Has("wait-file")) {
    AppendLine(out, "waiting at=" + std::to_string(NowMs()));
    if (!WaitForFile(f.Get("wait-file"), 120)) Die("no " + f.Get("wait-file"));
    std::this_thread::sleep_for(
        std::chrono::milliseconds(static_cast<int>(f.GetDouble("delay-ms", 0))));
  }
  // The progress thread reports even while a launch blocks (a paused slice).
  std::atomic<long> kernels{0};
  std::atomic<bool> stop{false};
  const int64_t t0 = NowMs();
  AppendLine(out, "go at=" + std::to_string(t0));
  std::thread progress([&] {
    while (!stop.load()) {
      AppendLine(out,
                 "p at=" + std::to_string(NowMs()) + " kernels=" + std::to_string(kernels.load()));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  unsigned us = kernel_us;
  void* params[] = {&us};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  // Batches of kernels between synchronisations keep the GPU fed even when
  // this process waits for a CPU on a loaded machine.
  const int batch = std::max(1, static_cast<int>(f.GetDouble("batch", 1)));
  // Host work after each synchronisation (a request's pre- and
  // post-processing), spent on the CPU: the GPU idles meanwhile whatever the
  // machine's speed.
  const auto think = std::chrono::duration<double, std::micro>(f.GetDouble("think-us", 0));
  while (std::chrono::steady_clock::now() < deadline) {
    if (think.count() > 0) {
      const auto until = std::chrono::steady_clock::now() + think;
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    for (int i = 0; i < batch && r == CUDA_SUCCESS; ++i) {
      r = d.LaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr);
    }
    if (r == CUDA_SUCCESS) r = d.StreamSynchronize(stream);
    if (r != CUDA_SUCCESS) {
      AppendLine(out, "launch failed " + std::to_string(int(r)) + " at=" + std::to_string(NowMs()));
      break;
    }
    kernels.fetch_add(batch);
  }
  stop.store(true);
  progress.join();
  AppendLine(out, "done kernels=" + std::to_string(kernels.load()) + " wall_ms=" +
                      std::to_string(NowMs() - t0) + " at=" + std::to_string(NowMs()));
  if (buf != 0) d.MemFree(buf);
  return r == CUDA_SUCCESS ? 0 : 1;
}

// Undoes the daemon's suspension of one of the user's own processes behind its
// back: the driver's restore + unlock, which any process of the same uid may
// call (docs/SECURITY.md). Writes "unsuspend ok at=MS" or what the driver said.
int Unsuspend(const Flags& f) {
  const std::string out = f.Get("out");
  const int pid = static_cast<int>(f.GetDouble("pid", 0));
#if CUDA_VERSION >= 12080
  CUresult r = cuInit(0);
  if (r == CUDA_SUCCESS) r = cuCheckpointProcessRestore(pid, nullptr);
  if (r == CUDA_SUCCESS) r = cuCheckpointProcessUnlock(pid, nullptr);
  AppendLine(out, std::string(r == CUDA_SUCCESS ? "unsuspend ok" : "unsuspend " + Name(r)) +
                      " at=" + std::to_string(NowMs()));
  return r == CUDA_SUCCESS ? 0 : 1;
#else
  AppendLine(out, "unsuspend unsupported pid=" + std::to_string(pid));
  return 2;
#endif
}

}  // namespace gpuslice::security
