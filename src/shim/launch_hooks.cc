// Kernel launches. Today they only pass through: interposing them now fixes
// the cost of the launch path (measured in bench/shim) and gives the
// compute-share part its place. The path is one acquire load, one indirect
// call: no lock, no system call, no allocation, no environment, no logging.

#include "shim/wrapper_util.h"

namespace gpuslice::shim {
namespace {

// Initialise on first use (also after fork); afterwards one load and branch.
inline void EnsureStarted() {
  // Acquire: pairs with the release that published the phase (and g_real).
  const int phase = g_phase.load(std::memory_order_acquire);
  if (__builtin_expect(phase < kPhasePassThrough || phase == kPhaseReattach, 0)) StartSlow();
}

}  // namespace
}  // namespace gpuslice::shim

using namespace gpuslice::shim;

#define GPUSLICE_LAUNCH_KERNEL(symbol)                                                         \
  GPUSLICE_EXPORT CUresult symbol(CUfunction f, unsigned int gx, unsigned int gy,              \
                                  unsigned int gz, unsigned int bx, unsigned int by,           \
                                  unsigned int bz, unsigned int shared, CUstream stream,       \
                                  void** params, void** extra) {                               \
    EnsureStarted();                                                                           \
    const auto real = REAL(symbol);                                                            \
    if (real == nullptr) return kMissingInDriver;                                              \
    return real(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);                     \
  }
GPUSLICE_LAUNCH_KERNEL(cuLaunchKernel)
GPUSLICE_LAUNCH_KERNEL(cuLaunchKernel_ptsz)
#undef GPUSLICE_LAUNCH_KERNEL

#define GPUSLICE_LAUNCH_KERNEL_EX(symbol)                                                      \
  GPUSLICE_EXPORT CUresult symbol(const CUlaunchConfig* config, CUfunction f, void** params,   \
                                  void** extra) {                                              \
    EnsureStarted();                                                                           \
    const auto real = REAL(symbol);                                                            \
    if (real == nullptr) return kMissingInDriver;                                              \
    return real(config, f, params, extra);                                                     \
  }
GPUSLICE_LAUNCH_KERNEL_EX(cuLaunchKernelEx)
GPUSLICE_LAUNCH_KERNEL_EX(cuLaunchKernelEx_ptsz)
#undef GPUSLICE_LAUNCH_KERNEL_EX

#define GPUSLICE_LAUNCH_COOPERATIVE(symbol)                                                    \
  GPUSLICE_EXPORT CUresult symbol(CUfunction f, unsigned int gx, unsigned int gy,              \
                                  unsigned int gz, unsigned int bx, unsigned int by,           \
                                  unsigned int bz, unsigned int shared, CUstream stream,       \
                                  void** params) {                                             \
    EnsureStarted();                                                                           \
    const auto real = REAL(symbol);                                                            \
    if (real == nullptr) return kMissingInDriver;                                              \
    return real(f, gx, gy, gz, bx, by, bz, shared, stream, params);                            \
  }
GPUSLICE_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel)
GPUSLICE_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz)
#undef GPUSLICE_LAUNCH_COOPERATIVE
