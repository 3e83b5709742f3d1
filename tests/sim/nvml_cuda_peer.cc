// nvml_cuda_peer: an ordinary CUDA driver-API program that the NVML tests run
// next to themselves, so that NVML has another process to observe.
//
//   nvml_cuda_peer <device ordinal> <bytes>
//
// Allocates <bytes> on the device, prints one line with the driver's view,
//   ready <pid> <free bytes> <total bytes>
// then runs sim_sleep_us kernels back to back until its stdin reaches EOF,
// frees everything and prints "done <kernels>". Exit status 0 on success;
// any CUDA error is reported on stderr with exit status 1.

#include <cuda.h>
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli/demo/sleep_kernel.h"

namespace {

void Check(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  const char* name = "?";
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "nvml_cuda_peer: %s failed: %s\n", call, name);
  std::exit(1);
}

// True once the parent closed our stdin (or wrote anything).
bool StopRequested() {
  pollfd p = {STDIN_FILENO, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: nvml_cuda_peer <device ordinal> <bytes>\n");
    return 2;
  }
  const int ordinal = std::atoi(argv[1]);
  const size_t bytes = std::strtoull(argv[2], nullptr, 10);

  Check(cuInit(0), "cuInit");
  CUdevice dev;
  Check(cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUdeviceptr buf = 0;
  if (bytes > 0) Check(cuMemAlloc(&buf, bytes), "cuMemAlloc");
  CUmodule mod;
  Check(cuModuleLoadData(&mod, gpuslice::cli::kSleepKernelPtx), "cuModuleLoadData");
  CUfunction fn;
  Check(cuModuleGetFunction(&fn, mod, "sim_sleep_us"), "cuModuleGetFunction");
  size_t free = 0, total = 0;
  Check(cuMemGetInfo(&free, &total), "cuMemGetInfo");
  std::printf("ready %d %zu %zu\n", static_cast<int>(getpid()), free, total);
  std::fflush(stdout);

  unsigned int us = 2000;
  void* params[] = {&us};
  long kernels = 0;
  while (!StopRequested()) {
    for (int i = 0; i < 5; ++i) {
      Check(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel");
      ++kernels;
    }
    Check(cuCtxSynchronize(), "cuCtxSynchronize");
  }
  if (buf != 0) Check(cuMemFree(buf), "cuMemFree");
  Check(cuModuleUnload(mod), "cuModuleUnload");
  Check(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
  std::printf("done %ld\n", kernels);
  return 0;
}
