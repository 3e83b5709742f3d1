// Kernel and graph launches: every route passes the compute gate
// (compute_gate.h) before the driver. Within the slice's share the added
// path is one acquire load and a branch (and a thread-local decrement when a
// share is set): no lock, no system call, no allocation, no logging.

#include "shim/gate/compute_gate.h"
#include "shim/base/resume_on_demand.h"
#include "shim/hooks/wrapper_util.h"

namespace gpuslice::shim {
namespace {

// Initialise on first use (also after fork); afterwards one load and branch.
// Then, as every entry point that uses the GPU does, ask for a resume if the
// job is suspended (resume_on_demand.h), before the gate: the gate's slow
// path records events, which a checkpointed process's driver holds.
inline void EnsureStarted() {
  // Acquire: pairs with the release that published the phase (and g_real).
  const int phase = g_phase.load(std::memory_order_acquire);
  if (__builtin_expect(phase < kPhasePassThrough || phase == kPhaseReattach, 0)) StartSlow();
  ResumeIfSuspended();
}

}  // namespace
}  // namespace gpuslice::shim

using namespace gpuslice::shim;

#define GPUSLICE_LAUNCH_KERNEL(symbol, per_thread)                                             \
  GPUSLICE_EXPORT CUresult symbol(CUfunction f, unsigned int gx, unsigned int gy,              \
                                  unsigned int gz, unsigned int bx, unsigned int by,           \
                                  unsigned int bz, unsigned int shared, CUstream stream,       \
                                  void** params, void** extra) {                               \
    EnsureStarted();                                                                           \
    const auto real = REAL(symbol);                                                            \
    if (real == nullptr) return kMissingInDriver;                                              \
    GateLaunch(stream, per_thread);                                                            \
    const CUresult r = real(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);         \
    GateLaunchDone(stream, per_thread);                                                        \
    return r;                                                                                  \
  }
GPUSLICE_LAUNCH_KERNEL(cuLaunchKernel, false)
GPUSLICE_LAUNCH_KERNEL(cuLaunchKernel_ptsz, true)
#undef GPUSLICE_LAUNCH_KERNEL

#define GPUSLICE_LAUNCH_KERNEL_EX(symbol, per_thread)                                          \
  GPUSLICE_EXPORT CUresult symbol(const CUlaunchConfig* config, CUfunction f, void** params,   \
                                  void** extra) {                                              \
    EnsureStarted();                                                                           \
    const auto real = REAL(symbol);                                                            \
    if (real == nullptr) return kMissingInDriver;                                              \
    if (config == nullptr) return real(config, f, params, extra);                              \
    GateLaunch(config->hStream, per_thread);                                                   \
    const CUresult r = real(config, f, params, extra);                                         \
    GateLaunchDone(config->hStream, per_thread);                                               \
    return r;                                                                                  \
  }
GPUSLICE_LAUNCH_KERNEL_EX(cuLaunchKernelEx, false)
GPUSLICE_LAUNCH_KERNEL_EX(cuLaunchKernelEx_ptsz, true)
#undef GPUSLICE_LAUNCH_KERNEL_EX

#define GPUSLICE_LAUNCH_COOPERATIVE(symbol, per_thread)                                        \
  GPUSLICE_EXPORT CUresult symbol(CUfunction f, unsigned int gx, unsigned int gy,              \
                                  unsigned int gz, unsigned int bx, unsigned int by,           \
                                  unsigned int bz, unsigned int shared, CUstream stream,       \
                                  void** params) {                                             \
    EnsureStarted();                                                                           \
    const auto real = REAL(symbol);                                                            \
    if (real == nullptr) return kMissingInDriver;                                              \
    GateLaunch(stream, per_thread);                                                            \
    const CUresult r = real(f, gx, gy, gz, bx, by, bz, shared, stream, params);                \
    GateLaunchDone(stream, per_thread);                                                        \
    return r;                                                                                  \
  }
GPUSLICE_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel, false)
GPUSLICE_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz, true)
#undef GPUSLICE_LAUNCH_COOPERATIVE

// A graph launch is one gated launch: its kernels run back to back, and the
// batch sizing learns its GPU time from the completion markers.
#define GPUSLICE_GRAPH_LAUNCH(symbol, per_thread)                                              \
  GPUSLICE_EXPORT CUresult symbol(CUgraphExec graph, CUstream stream) {                        \
    EnsureStarted();                                                                           \
    const auto real = REAL(symbol);                                                            \
    if (real == nullptr) return kMissingInDriver;                                              \
    GateLaunch(stream, per_thread);                                                            \
    const CUresult r = real(graph, stream);                                                    \
    GateLaunchDone(stream, per_thread);                                                        \
    return r;                                                                                  \
  }
GPUSLICE_GRAPH_LAUNCH(cuGraphLaunch, false)
GPUSLICE_GRAPH_LAUNCH(cuGraphLaunch_ptsz, true)
#undef GPUSLICE_GRAPH_LAUNCH
