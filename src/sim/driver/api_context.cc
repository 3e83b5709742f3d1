// Primary and created contexts, the per-thread context stack.

#include <algorithm>

#include "sim/driver/driver.h"

using namespace gpuslice::sim::driver;  // NOLINT: entry points are extern "C".

namespace {

constexpr unsigned kCtxFlagsMask = 0x1f;  // Scheduling, map-host, resize-local-mem flags.

CUresult ValidContext(CUcontext handle, Context** out) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Context* ctx = reinterpret_cast<Context*>(handle);
  if (ctx == nullptr || Driver::Get().contexts.count(ctx) == 0) return CUDA_ERROR_INVALID_CONTEXT;
  *out = ctx;
  return CUDA_SUCCESS;
}

CUresult CreateContext(CUcontext* pctx, unsigned flags, CUdevice dev) {
  Device* d = nullptr;
  if (CUresult r = LookupDevice(dev, &d); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr || (flags & ~kCtxFlagsMask) != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  auto* ctx = new Context();
  ctx->device = d;
  ctx->flags = flags;
  if (CUresult r = ActivateLocked(ctx); r != CUDA_SUCCESS) {
    delete ctx;
    return r;
  }
  drv.contexts.insert(ctx);
  ContextStack().push_back(ctx);
  *pctx = reinterpret_cast<CUcontext>(ctx);
  return CUDA_SUCCESS;
}

}  // namespace

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  Device* d = nullptr;
  if (CUresult r = LookupDevice(dev, &d); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  if (d->primary == nullptr) {
    d->primary = new Context();
    d->primary->device = d;
    d->primary->primary = true;
    drv.contexts.insert(d->primary);
  }
  d->primary->flags = d->primary_flags;
  if (CUresult r = ActivateLocked(d->primary); r != CUDA_SUCCESS) return r;
  ++d->primary->primary_refs;
  *pctx = reinterpret_cast<CUcontext>(d->primary);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  Device* d = nullptr;
  if (CUresult r = LookupDevice(dev, &d); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  if (d->primary == nullptr || d->primary->primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--d->primary->primary_refs == 0) DeactivateLocked(d->primary);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  Device* d = nullptr;
  if (CUresult r = LookupDevice(dev, &d); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  // Destroys the context's resources; it comes back on next use.
  if (d->primary != nullptr) DeactivateLocked(d->primary);
  d->primary_flags = 0;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags,
                                                               int* active) {
  Device* d = nullptr;
  if (CUresult r = LookupDevice(dev, &d); r != CUDA_SUCCESS) return r;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  *flags = d->primary_flags;
  *active = d->primary != nullptr && d->primary->active ? 1 : 0;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev,
                                                                  unsigned int flags) {
  Device* d = nullptr;
  if (CUresult r = LookupDevice(dev, &d); r != CUDA_SUCCESS) return r;
  if ((flags & ~kCtxFlagsMask) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  d->primary_flags = flags;
  return CUDA_SUCCESS;
}

#if CUDA_VERSION >= 12050
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params,
                                                   unsigned int flags, CUdevice dev) {
  if (params != nullptr && (params->numExecAffinityParams != 0 || params->cigParams != nullptr)) {
    return CUDA_ERROR_NOT_SUPPORTED;  // Green contexts / CIG are not simulated.
  }
  return CreateContext(pctx, flags, dev);
}
#endif

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params,
                                                   int num_params, unsigned int flags,
                                                   CUdevice dev) {
  if (params != nullptr && num_params > 0) return CUDA_ERROR_NOT_SUPPORTED;
  return CreateContext(pctx, flags, dev);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags,
                                                   CUdevice dev) {
  return CreateContext(pctx, flags, dev);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CreateContext(pctx, flags, dev);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCtxDestroy_v2(CUcontext handle) {
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Context* ctx = nullptr;
  if (CUresult r = ValidContext(handle, &ctx); r != CUDA_SUCCESS) return r;
  if (ctx->primary)
    return CUDA_ERROR_INVALID_CONTEXT;  // Primary contexts are released, not destroyed.
  DeactivateLocked(ctx);
  drv.contexts.erase(ctx);
  std::vector<Context*>& stack = ContextStack();
  stack.erase(std::remove(stack.begin(), stack.end(), ctx), stack.end());
  delete ctx;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext handle) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::vector<Context*>& stack = ContextStack();
  if (handle == nullptr) {
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  Context* ctx = nullptr;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  if (CUresult r = ValidContext(handle, &ctx); r != CUDA_SUCCESS) return r;
  if (stack.empty()) {
    stack.push_back(ctx);
  } else {
    stack.back() = ctx;
  }
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(CurrentContext());
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext handle) {
  Context* ctx = nullptr;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  if (CUresult r = ValidContext(handle, &ctx); r != CUDA_SUCCESS) return r;
  ContextStack().push_back(ctx);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::vector<Context*>& stack = ContextStack();
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = reinterpret_cast<CUcontext>(stack.back());
  stack.pop_back();
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = CurrentContext();
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (Driver::Get().contexts.count(ctx) == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *device = ctx->device->ordinal;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCtxGetFlags(unsigned int* flags) {
  Context* ctx = nullptr;
  if (CUresult r = CurrentActiveContext(&ctx); r != CUDA_SUCCESS) return r;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = ctx->flags;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  Context* ctx = nullptr;
  if (CUresult r = CurrentActiveContext(&ctx); r != CUDA_SUCCESS) return r;
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = -5;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCtxSynchronize() {
  Context* ctx = nullptr;
  if (CUresult r = CurrentActiveContext(&ctx); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  Executor* exec;
  {
    std::lock_guard<DriverMutex> lock(drv.mu);
    for (Stream* s : drv.streams) {
      if (s->ctx == ctx && s->capture_graph != nullptr) {
        s->capture_invalidated = true;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      }
    }
    exec = drv.ExecutorFor(ctx->device);
  }
  exec->WaitFor(exec->last_submitted());
  return CUDA_SUCCESS;
}

// Entry points with the same signature and behaviour: legacy names whose
// _v2 changed nothing visible here, and the per-thread-default-stream
// variants (the simulator gives every thread the legacy default stream).
GPUSLICE_CU_ALIAS(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2)
GPUSLICE_CU_ALIAS(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2)
GPUSLICE_CU_ALIAS(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags_v2)
GPUSLICE_CU_ALIAS(cuCtxDestroy, cuCtxDestroy_v2)
GPUSLICE_CU_ALIAS(cuCtxPushCurrent, cuCtxPushCurrent_v2)
GPUSLICE_CU_ALIAS(cuCtxPopCurrent, cuCtxPopCurrent_v2)
