#pragma once

// What the small CUDA test programs in tests/shim (compute_worker,
// launch_loop) share: the simulator's sleep kernel, an exit-on-error check
// and a monotonic clock.

#include <cuda.h>
#include <errno.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace gpuslice::test {

// `sim_sleep_us(us)`: the simulated driver keeps the GPU busy for `us`
// microseconds for this kernel (its body is not run).
inline constexpr char kSleepKernelPtx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry sim_sleep_us(.param .u32 us)\n{\n ret;\n}\n";

// Exits 1 naming the call and the CUDA error unless `r` is success.
inline void Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "%s: %s failed: %s\n", program_invocation_short_name, what,
               name ? name : "?");
  std::exit(1);
}

inline uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace gpuslice::test
