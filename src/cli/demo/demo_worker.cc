// gpuslice-demo-worker: a small CUDA driver API program used by the demo and
// by end-to-end tests. It holds some device memory and keeps the GPU busy for
// a given fraction of the time, then reports what it did. It is an ordinary
// CUDA program: it runs unchanged on a real GPU or on the simulated one.
//
//   gpuslice-demo-worker --name A --mem 6GiB --duty 40% --seconds 3

#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "cli/demo/sleep_kernel.h"
#include "core/units.h"

namespace {

struct Options {
  std::string name = "worker";
  uint64_t mem = 1ull << 30;
  uint32_t duty_milli = 500;
  double seconds = 3;
  unsigned kernel_us = 2000;
  int device = 0;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "gpuslice-demo-worker: %s\n", what.c_str());
  std::exit(2);
}

void Check(CUresult r, const char* call, const Options& o) {
  if (r == CUDA_SUCCESS) return;
  const char* name = "?";
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "[%s] %s failed: %s\n", o.name.c_str(), call, name);
  std::exit(r == CUDA_ERROR_OUT_OF_MEMORY ? 3 : 1);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--name") {
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
    } else if (a == "--device") {
      o.device = std::atoi(value().c_str());
    } else {
      Die("unknown option " + a + " (use --name --mem --duty --seconds --kernel-us --device)");
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  Check(cuInit(0), "cuInit", o);
  CUdevice dev;
  Check(cuDeviceGet(&dev, o.device), "cuDeviceGet", o);
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain", o);
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent", o);

  CUdeviceptr buf = 0;
  if (o.mem > 0) Check(cuMemAlloc(&buf, o.mem), "cuMemAlloc", o);
  if (o.mem > 0) Check(cuMemsetD8(buf, 0, o.mem < (64u << 20) ? o.mem : (64u << 20)), "cuMemsetD8", o);

  CUmodule mod;
  Check(cuModuleLoadData(&mod, gpuslice::cli::kSleepKernelPtx), "cuModuleLoadData", o);
  CUfunction fn;
  Check(cuModuleGetFunction(&fn, mod, "sim_sleep_us"), "cuModuleGetFunction", o);
  CUstream stream;
  Check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate", o);
  CUevent start, stop;
  Check(cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate", o);
  Check(cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate", o);

  // Keep the GPU busy `duty` of the time: launch one kernel of kernel_us,
  // wait for it, then idle so that busy / (busy + idle) == duty.
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  auto deadline = t0 + std::chrono::duration<double>(o.seconds);
  double gpu_ms = 0;
  long kernels = 0;
  unsigned us = o.kernel_us;
  void* params[] = {&us};
  while (Clock::now() < deadline) {
    auto k0 = Clock::now();
    Check(cuEventRecord(start, stream), "cuEventRecord", o);
    Check(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr), "cuLaunchKernel", o);
    Check(cuEventRecord(stop, stream), "cuEventRecord", o);
    Check(cuEventSynchronize(stop), "cuEventSynchronize", o);
    float ms = 0;
    Check(cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime", o);
    gpu_ms += ms;
    ++kernels;
    if (o.duty_milli < 1000) {
      auto busy = Clock::now() - k0;
      auto idle = busy * (1000 - o.duty_milli) / o.duty_milli;
      std::this_thread::sleep_for(idle);
    }
  }
  double wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("[%s] held %s, ran %ld kernels, GPU time %.0f ms of %.0f ms (%.0f%%)\n",
              o.name.c_str(), gpuslice::core::FormatBytes(o.mem).c_str(), kernels, gpu_ms, wall_ms,
              100.0 * gpu_ms / wall_ms);
  if (buf) Check(cuMemFree(buf), "cuMemFree", o);
  Check(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease", o);
  return 0;
}
