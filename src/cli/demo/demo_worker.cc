// gpuslice-demo-worker: a small CUDA driver API program used by the demo and
// by end-to-end tests. It holds some device memory and asks the GPU for a
// given fraction of its time, as requests on a fixed schedule, then reports
// what it did and what it got. It is an ordinary CUDA program: it runs
// unchanged on a real GPU or on the simulated one.
//
//   gpuslice-demo-worker --name A --mem 6GiB --duty 40% --seconds 3
//
// It loads the driver as CUDA runtimes do, with dlopen("libcuda.so.1") (a
// real GPU's, or the one LD_LIBRARY_PATH names), and when there is none, the
// simulated driver installed beside it (<bindir>/../lib/sim), so that it runs
// without LD_LIBRARY_PATH on a machine without a GPU.

#include <cuda.h>
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cli/demo/open_loop.h"
#include "cli/demo/sleep_kernel.h"
#include "core/units.h"
#include "core/version.h"

namespace {

struct Options {
  std::string name = "worker";
  uint64_t mem = 1ull << 30;
  uint32_t duty_milli = 500;
  double seconds = 3;
  unsigned kernel_us = 2000;
  int device = 0;
  // Fill all of the memory with a pattern first and check every byte of it
  // at the end (suspend/resume tests: nothing may change in between).
  bool verify = false;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "gpuslice-demo-worker: %s\n", what.c_str());
  std::exit(2);
}

// The driver entry points the worker calls, by the names cuda.h maps them to
// (cuMemAlloc is cuMemAlloc_v2, ...), looked up with dlsym like a runtime does.
#define GPUSLICE_WORKER_CALLS(X)                                                              \
  X(cuInit)                                                                                   \
  X(cuDeviceGet)                                                                              \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuMemAlloc)   \
      X(cuMemFree) X(cuMemsetD8) X(cuModuleLoadData) X(cuModuleGetFunction) X(cuStreamCreate) \
          X(cuEventCreate) X(cuEventRecord) X(cuLaunchKernel) X(cuEventSynchronize)           \
              X(cuEventElapsedTime) X(cuGetErrorName) X(cuMemcpyHtoD) X(cuMemcpyDtoH)
#define GPUSLICE_STR_(x) #x
#define GPUSLICE_STR(x) GPUSLICE_STR_(x)

struct Driver {
#define GPUSLICE_MEMBER(fn) decltype(&fn) fn##_ = nullptr;
  GPUSLICE_WORKER_CALLS(GPUSLICE_MEMBER)
#undef GPUSLICE_MEMBER
} g_cu;

// The directory of this program.
std::string ProgramDir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

void LoadDriver() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) {
    std::string first = dlerror();
    std::string sim = ProgramDir() + "/../lib/sim/libcuda.so.1";
    h = dlopen(sim.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr) {
      Die("no CUDA driver: " + first + "; no simulated one at " + sim + " either");
    }
  }
#define GPUSLICE_LOAD(fn)                                                    \
  g_cu.fn##_ = reinterpret_cast<decltype(&fn)>(dlsym(h, GPUSLICE_STR(fn))); \
  if (g_cu.fn##_ == nullptr) Die("the CUDA driver lacks " GPUSLICE_STR(fn));
  GPUSLICE_WORKER_CALLS(GPUSLICE_LOAD)
#undef GPUSLICE_LOAD
}

constexpr char kUsage[] =
    "usage: gpuslice-demo-worker [--name NAME] [--mem SIZE] [--duty PCT] [--seconds S]\n"
    "                            [--kernel-us US] [--device N] [--verify]\n"
    "Holds SIZE of GPU memory (default 1GiB) and, for S seconds (default 3), asks the\n"
    "GPU for PCT of its time (default 50%) on device N (default 0): a request of one\n"
    "kernel of US microseconds (default 2000) arrives every US / PCT, on a schedule\n"
    "fixed from the start; a request that arrives while the previous one still runs\n"
    "starts as soon as that one is done (late). Then it prints what it did:\n"
    "  [NAME] held SIZE, ran K kernels, GPU time G ms of W ms (P%); launches waited X ms\n"
    "  [NAME] requests: demand PCT (US us every T ms), offered R, served S, delivered D%\n"
    "         of the offered GPU time; latency p50 A ms, p99 B ms, max M ms; late L (at\n"
    "         most Z ms)                                        (on one line)\n"
    "G is the kernels' own time (K x US); X is the time launches spent waiting before\n"
    "their kernels ran (under a compute share: for their turn). R counts the requests\n"
    "that arrived in the S seconds, S those completed by then (D = S / R); latency runs\n"
    "from a request's arrival to its completion; L requests started late, Z the longest\n"
    "a request waited to start.\n"
    "--verify fills all of SIZE with a pattern first and checks every byte at the end:\n"
    "  [NAME] verified SIZE: D bytes differ     (exit status 4 when D > 0)\n";

void Check(CUresult r, const char* call, const Options& o) {
  if (r == CUDA_SUCCESS) return;
  const char* name = "?";
  g_cu.cuGetErrorName_(r, &name);
  std::fprintf(stderr, "[%s] %s failed: %s\n", o.name.c_str(), call, name);
  std::exit(r == CUDA_ERROR_OUT_OF_MEMORY ? 3 : 1);
}

// --verify's pattern: each 8-byte word holds a mix of its offset, so that a
// word moved, lost or zeroed anywhere is caught.
constexpr size_t kPatternChunk = 64u << 20;
void FillPattern(uint64_t offset, uint64_t* words, size_t bytes) {
  for (size_t i = 0; i < bytes / sizeof(uint64_t); ++i) {
    uint64_t x = (offset / sizeof(uint64_t) + i) * 0x9E3779B97F4A7C15ull;
    words[i] = x ^ (x >> 29);
  }
  // A tail shorter than a word: the bytes of the next word's pattern.
  if (size_t tail = bytes % sizeof(uint64_t); tail != 0) {
    uint64_t x = (offset / sizeof(uint64_t) + bytes / sizeof(uint64_t)) * 0x9E3779B97F4A7C15ull;
    uint64_t w = x ^ (x >> 29);
    std::memcpy(reinterpret_cast<unsigned char*>(words) + bytes - tail, &w, tail);
  }
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Die("missing value after " + a);
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--version") {
      std::printf("gpuslice-demo-worker %s\n", std::string(gpuslice::core::Version()).c_str());
      std::exit(0);
    } else if (a == "--name") {
      o.name = value();
    } else if (a == "--mem") {
      auto r = gpuslice::core::ParseBytes(value());
      if (!r.ok()) Die("--mem: " + r.status().message());
      o.mem = *r;
    } else if (a == "--duty") {
      auto r = gpuslice::core::ParseShareMilli(value());
      if (!r.ok()) Die("--duty: " + r.status().message());
      o.duty_milli = *r;
    } else if (a == "--seconds") {
      o.seconds = std::atof(value().c_str());
      if (o.seconds <= 0) Die("--seconds must be positive");
    } else if (a == "--kernel-us") {
      o.kernel_us = static_cast<unsigned>(std::atoi(value().c_str()));
      if (o.kernel_us == 0) Die("--kernel-us must be positive");
    } else if (a == "--verify") {
      o.verify = true;
    } else if (a == "--device") {
      o.device = std::atoi(value().c_str());
    } else {
      Die("unknown option " + a + " (see --help)");
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  LoadDriver();
  Check(g_cu.cuInit_(0), "cuInit", o);
  CUdevice dev;
  Check(g_cu.cuDeviceGet_(&dev, o.device), "cuDeviceGet", o);
  CUcontext ctx;
  Check(g_cu.cuDevicePrimaryCtxRetain_(&ctx, dev), "cuDevicePrimaryCtxRetain", o);
  Check(g_cu.cuCtxSetCurrent_(ctx), "cuCtxSetCurrent", o);

  CUdeviceptr buf = 0;
  if (o.mem > 0) Check(g_cu.cuMemAlloc_(&buf, o.mem), "cuMemAlloc", o);
  if (o.mem > 0 && !o.verify) {
    Check(g_cu.cuMemsetD8_(buf, 0, o.mem < (64u << 20) ? o.mem : (64u << 20)), "cuMemsetD8", o);
  }
  if (o.mem > 0 && o.verify) {
    // In chunks through a host buffer, as a program loading its data would.
    std::vector<uint64_t> host(kPatternChunk / sizeof(uint64_t));
    for (uint64_t off = 0; off < o.mem; off += kPatternChunk) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kPatternChunk, o.mem - off));
      FillPattern(off, host.data(), n);
      Check(g_cu.cuMemcpyHtoD_(buf + off, host.data(), n), "cuMemcpyHtoD", o);
    }
  }

  CUmodule mod;
  Check(g_cu.cuModuleLoadData_(&mod, gpuslice::cli::kSleepKernelPtx), "cuModuleLoadData", o);
  CUfunction fn;
  Check(g_cu.cuModuleGetFunction_(&fn, mod, "sim_sleep_us"), "cuModuleGetFunction", o);
  CUstream stream;
  Check(g_cu.cuStreamCreate_(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate", o);
  CUevent start, stop;
  Check(g_cu.cuEventCreate_(&start, CU_EVENT_DEFAULT), "cuEventCreate", o);
  Check(g_cu.cuEventCreate_(&stop, CU_EVENT_DEFAULT), "cuEventCreate", o);

  // The load is an open loop: a request of kernel_us of GPU work arrives
  // every kernel_us / duty, on a schedule fixed from the start, whether or
  // not the previous one is done (as requests reach a service). A request
  // starts when it arrives, or at once when it arrived while the previous
  // one still ran (it is late, and its wait is in its latency). Idling in
  // proportion to the last kernel's time instead (as this worker once did)
  // turns every wait for the GPU into a longer idle gap: the demand falls
  // exactly when the job is held back, and the job asks for less than its
  // duty.
  using Clock = std::chrono::steady_clock;
  auto ns = [](Clock::time_point t) {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
  };
  const auto t0 = Clock::now();
  const auto deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  const uint64_t work_ns = uint64_t{o.kernel_us} * 1000;
  gpuslice::cli::OpenLoop load(ns(t0), gpuslice::cli::OpenLoop::PeriodFor(work_ns, o.duty_milli),
                               ns(deadline));
  double gpu_ms = 0;
  long kernels = 0;
  unsigned us = o.kernel_us;
  void* params[] = {&us};
  for (uint64_t i = 0; load.Offered(i); ++i) {
    const auto arrival = Clock::time_point(std::chrono::nanoseconds(load.Arrival(i)));
    if (Clock::now() >= deadline) break;  // What is still queued is not served.
    std::this_thread::sleep_until(arrival);
    const auto started = Clock::now();
    Check(g_cu.cuEventRecord_(start, stream), "cuEventRecord", o);
    Check(g_cu.cuLaunchKernel_(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr), "cuLaunchKernel",
          o);
    Check(g_cu.cuEventRecord_(stop, stream), "cuEventRecord", o);
    Check(g_cu.cuEventSynchronize_(stop), "cuEventSynchronize", o);
    load.Record(i, ns(started), ns(Clock::now()));
    float ms = 0;
    Check(g_cu.cuEventElapsedTime_(&ms, start, stop), "cuEventElapsedTime", o);
    gpu_ms += ms;
    ++kernels;
  }
  double wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  // GPU time is what the kernels themselves took; the events around each
  // launch also time how long it waited (for the slice's turn, under a
  // compute share), reported apart.
  double kernel_ms = kernels * (o.kernel_us / 1000.0);
  double waited_ms = gpu_ms > kernel_ms ? gpu_ms - kernel_ms : 0;
  std::printf(
      "[%s] held %s, ran %ld kernels, GPU time %.0f ms of %.0f ms (%.0f%%); launches waited "
      "%.0f ms\n",
      o.name.c_str(), gpuslice::core::FormatBytes(o.mem).c_str(), kernels, kernel_ms, wall_ms,
      100.0 * kernel_ms / wall_ms, waited_ms);
  const gpuslice::cli::OpenLoopSummary sum = load.Summarize();
  const double period_ms = static_cast<double>(load.Arrival(1) - load.Arrival(0)) / 1e6;
  std::printf(
      "[%s] requests: demand %s (%u us every %.2f ms), offered %llu, served %llu, delivered "
      "%.1f%% of the offered GPU time; latency p50 %.2f ms, p99 %.2f ms, max %.2f ms; late "
      "%llu (at most %.2f ms)\n",
      o.name.c_str(), gpuslice::core::FormatShareMilli(o.duty_milli).c_str(), o.kernel_us,
      period_ms, static_cast<unsigned long long>(sum.offered),
      static_cast<unsigned long long>(sum.served), 100.0 * sum.delivered, sum.p50_ns / 1e6,
      sum.p99_ns / 1e6, sum.max_ns / 1e6, static_cast<unsigned long long>(sum.late),
      sum.max_late_ns / 1e6);
  uint64_t differ = 0;
  if (buf && o.verify) {
    std::vector<uint64_t> want(kPatternChunk / sizeof(uint64_t));
    std::vector<uint64_t> got(want.size());
    for (uint64_t off = 0; off < o.mem; off += kPatternChunk) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kPatternChunk, o.mem - off));
      FillPattern(off, want.data(), n);
      Check(g_cu.cuMemcpyDtoH_(got.data(), buf + off, n), "cuMemcpyDtoH", o);
      const auto* a = reinterpret_cast<const unsigned char*>(want.data());
      const auto* b = reinterpret_cast<const unsigned char*>(got.data());
      if (std::memcmp(a, b, n) == 0) continue;
      for (size_t i = 0; i < n; ++i) differ += a[i] != b[i];
    }
    std::printf("[%s] verified %s: %llu bytes differ\n", o.name.c_str(),
                gpuslice::core::FormatBytes(o.mem).c_str(),
                static_cast<unsigned long long>(differ));
  }
  std::fflush(stdout);
  if (buf) Check(g_cu.cuMemFree_(buf), "cuMemFree", o);
  Check(g_cu.cuDevicePrimaryCtxRelease_(dev), "cuDevicePrimaryCtxRelease", o);
  return differ > 0 ? 4 : 0;
}
