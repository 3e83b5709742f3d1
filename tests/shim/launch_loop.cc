// A CUDA program for monitor_e2e_test: launches `sim_sleep_us` kernels of
// N us one at a time (launch, synchronise) for S seconds and keeps the
// number of launches done so far in COUNT_FILE (rewritten after each one),
// so that a test can watch the loop progress, stop and resume while the
// program runs under the shim.
//
//   launch_loop COUNT_FILE KERNEL_US SECONDS
//
// Exits 0 after S seconds, printing "launches=N"; 1 on a CUDA error.

#include <cuda.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_program.h"

namespace {

using gpuslice::test::Check;
using gpuslice::test::NowNs;
constexpr const char* kPtx = gpuslice::test::kSleepKernelPtx;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: launch_loop COUNT_FILE KERNEL_US SECONDS\n");
    return 2;
  }
  const int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    std::fprintf(stderr, "launch_loop: cannot open %s: %s\n", argv[1], std::strerror(errno));
    return 2;
  }
  unsigned kernel_us = unsigned(std::atoi(argv[2]));
  const double seconds = std::atof(argv[3]);
  if (kernel_us == 0 || seconds <= 0) {
    std::fprintf(stderr, "launch_loop: KERNEL_US and SECONDS must be positive\n");
    return 2;
  }
  Check(cuInit(0), "cuInit");
  CUdevice dev;
  Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUmodule mod;
  Check(cuModuleLoadData(&mod, kPtx), "cuModuleLoadData");
  CUfunction fn;
  Check(cuModuleGetFunction(&fn, mod, "sim_sleep_us"), "cuModuleGetFunction");
  CUstream stream;
  Check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  void* params[] = {&kernel_us};
  const uint64_t end = NowNs() + uint64_t(seconds * 1e9);
  unsigned long long launches = 0;
  while (NowNs() < end) {
    Check(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr), "cuLaunchKernel");
    Check(cuStreamSynchronize(stream), "cuStreamSynchronize");
    ++launches;
    char line[32];
    const int n = std::snprintf(line, sizeof(line), "%llu\n", launches);
    if (pwrite(fd, line, size_t(n), 0) != n) {
      std::fprintf(stderr, "launch_loop: cannot write the count: %s\n", std::strerror(errno));
      return 1;
    }
  }
  close(fd);
  std::printf("launches=%llu\n", launches);
  return 0;
}
