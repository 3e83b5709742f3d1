#pragma once

// Shared by cuda_probe's source files: the checks (CHECK, CU, CU_IS), the
// error names, the PTX module and the context every mode starts from.

#include <cuda.h>

#include <cstdio>
#include <cstdlib>

namespace probe {

inline const char* Name(CUresult r) {
  const char* s = nullptr;
  cuGetErrorName(r, &s);
  return s ? s : "?";
}

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

#define CU(call) CU_IS(call, CUDA_SUCCESS)
#define CU_IS(call, want)                                                                     \
  do {                                                                                        \
    CUresult r_ = (call);                                                                     \
    if (r_ != (want)) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s returned %s, expected %s\n", __FILE__, __LINE__, #call, \
                   Name(r_), Name(want));                                                     \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

// PTX with the simulator's timed kernel and an ordinary one.
inline constexpr char kPtx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry sim_sleep_us(.param .u32 us)\n{\n ret;\n}\n"
    ".visible .entry saxpy(.param .u64 x)\n{\n ret;\n}\n";

struct Setup {
  CUcontext ctx = nullptr;
  CUmodule mod = nullptr;
  CUfunction sleep = nullptr;
  CUfunction saxpy = nullptr;
};

inline Setup Init() {
  Setup s;
  CU(cuInit(0));
  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&s.ctx, dev));
  CU(cuCtxSetCurrent(s.ctx));
  CU(cuModuleLoadData(&s.mod, kPtx));
  CU(cuModuleGetFunction(&s.sleep, s.mod, "sim_sleep_us"));
  CU(cuModuleGetFunction(&s.saxpy, s.mod, "saxpy"));
  return s;
}

inline void Sleep(const Setup& s, unsigned us, CUstream stream) {
  void* args[] = {&us};
  CU(cuLaunchKernel(s.sleep, 1, 1, 1, 32, 1, 1, 0, stream, args, nullptr));
}

}  // namespace probe
