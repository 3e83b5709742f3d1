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
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

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

int Work(const Flags& f) {
  const std::string out = f.Get("out");
  const unsigned kernel_us = static_cast<unsigned>(f.GetDouble("kernel-us", 200));
  const double seconds = f.GetDouble("seconds", 3);
  AppendLine(out, "start pid=" + std::to_string(getpid()) + " at=" + std::to_string(NowMs()));
  InitContext(static_cast<int>(f.GetDouble("device", 0)), out);
  CUdeviceptr buf = 0;
  if (f.Has("mem") && cuMemAlloc(&buf, f.GetBytes("mem", 0)) != CUDA_SUCCESS) {
    AppendLine(out, "alloc refused at=" + std::to_string(NowMs()));
    return 3;
  }
  CUmodule mod;
  CUfunction fn;
  CUstream stream;
  CUresult r = cuModuleLoadData(&mod, cli::kSleepKernelPtx);
  if (r == CUDA_SUCCESS) r = cuModuleGetFunction(&fn, mod, "sim_sleep_us");
  if (r == CUDA_SUCCESS) r = cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  if (r != CUDA_SUCCESS) {
    AppendLine(out, "setup failed " + Name(r));
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
      r = cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr);
    }
    if (r == CUDA_SUCCESS) r = cuStreamSynchronize(stream);
    if (r != CUDA_SUCCESS) {
      AppendLine(out, "launch failed " + Name(r) + " at=" + std::to_string(NowMs()));
      break;
    }
    kernels.fetch_add(batch);
  }
  stop.store(true);
  progress.join();
  AppendLine(out, "done kernels=" + std::to_string(kernels.load()) + " wall_ms=" +
                      std::to_string(NowMs() - t0) + " at=" + std::to_string(NowMs()));
  if (buf != 0) cuMemFree(buf);
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
