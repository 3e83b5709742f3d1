// Streams and events.

#include "sim/driver/driver.h"
#include "sim/sim_clock.h"

using namespace gpuslice::sim::driver;  // NOLINT: entry points are extern "C".

namespace {

CUresult CreateStream(CUstream* out, unsigned flags, int priority) {
  Context* ctx = nullptr;
  if (CUresult r = CurrentActiveContext(&ctx); r != CUDA_SUCCESS) return r;
  if (out == nullptr || (flags & ~CU_STREAM_NON_BLOCKING) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  auto* s = new Stream();
  s->ctx = ctx;
  s->flags = flags;
  s->priority = std::max(-5, std::min(0, priority));  // Clamped like the driver does.
  Driver::Get().streams.insert(s);
  *out = reinterpret_cast<CUstream>(s);
  return CUDA_SUCCESS;
}

CUresult StreamInfo(CUstream handle, Stream** out) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  return ResolveStreamLocked(handle, out);
}

CUresult ValidEvent(CUevent handle, Event** out) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Event* e = reinterpret_cast<Event*>(handle);
  if (e == nullptr || Driver::Get().events.count(e) == 0) return CUDA_ERROR_INVALID_HANDLE;
  *out = e;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult gpuslice::sim::driver::SynchronizeStream(CUstream handle) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  Executor* exec;
  uint64_t seq;
  {
    std::lock_guard<DriverMutex> lock(drv.mu);
    Stream* s = nullptr;
    if (CUresult r = ResolveStreamLocked(handle, &s); r != CUDA_SUCCESS) return r;
    if (s->capture_graph != nullptr) {
      s->capture_invalidated = true;
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    exec = drv.ExecutorFor(s->ctx->device);
    // The legacy stream synchronises with all blocking streams: everything.
    seq = s == s->ctx->null_stream ? exec->last_submitted() : s->last_seq;
  }
  exec->WaitFor(seq);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuStreamCreate(CUstream* out, unsigned int flags) {
  return CreateStream(out, flags, 0);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* out, unsigned int flags,
                                                               int priority) {
  return CreateStream(out, flags, priority);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuStreamDestroy_v2(CUstream handle) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Stream* s = reinterpret_cast<Stream*>(handle);
  if (s == nullptr || drv.streams.count(s) == 0) return CUDA_ERROR_INVALID_HANDLE;
  // Work already queued still runs: it is owned by the executor.
  drv.streams.erase(s);
  delete s;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuStreamQuery(CUstream handle) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Stream* s = nullptr;
  if (CUresult r = ResolveStreamLocked(handle, &s); r != CUDA_SUCCESS) return r;
  if (s->capture_graph != nullptr) {
    s->capture_invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  Executor* exec = drv.ExecutorFor(s->ctx->device);
  uint64_t seq = s == s->ctx->null_stream ? exec->last_submitted() : s->last_seq;
  return exec->Done(seq) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream handle) {
  return SynchronizeStream(handle);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuStreamGetPriority(CUstream handle, int* priority) {
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Stream* s = nullptr;
  if (CUresult r = StreamInfo(handle, &s); r != CUDA_SUCCESS) return r;
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *priority = s->priority;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuStreamGetFlags(CUstream handle, unsigned int* flags) {
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Stream* s = nullptr;
  if (CUresult r = StreamInfo(handle, &s); r != CUDA_SUCCESS) return r;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = s->flags;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuStreamGetCtx(CUstream handle, CUcontext* pctx) {
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Stream* s = nullptr;
  if (CUresult r = StreamInfo(handle, &s); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(s->ctx);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuStreamWaitEvent(CUstream handle, CUevent event,
                                                      unsigned int flags) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Stream* s = nullptr;
  if (CUresult r = ResolveStreamLocked(handle, &s); r != CUDA_SUCCESS) return r;
  Event* e = nullptr;
  if (CUresult r = ValidEvent(event, &e); r != CUDA_SUCCESS) return r;
  if (flags != 0 && flags != CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  if (e->executor == nullptr) return CUDA_SUCCESS;  // Never recorded: nothing to wait for.
  Executor* exec = drv.ExecutorFor(s->ctx->device);
  // Same executor: in-order execution already places the record first.
  if (e->executor == exec || s->capture_graph != nullptr) return CUDA_SUCCESS;
  Work w;
  w.kind = Work::Kind::kWait;
  w.wait_on = e->executor;
  w.wait_seq = e->seq;
  return SubmitLocked(s, std::move(w), nullptr);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuLaunchHostFunc(CUstream handle, CUhostFn fn, void* data) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Stream* s = nullptr;
  if (CUresult r = ResolveStreamLocked(handle, &s); r != CUDA_SUCCESS) return r;
  Work w;
  w.action = [fn, data] { fn(data); };
  return SubmitLocked(s, std::move(w), nullptr);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuStreamAddCallback(CUstream handle, CUstreamCallback cb,
                                                        void* data, unsigned int flags) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (cb == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Stream* s = nullptr;
  if (CUresult r = ResolveStreamLocked(handle, &s); r != CUDA_SUCCESS) return r;
  CUstream reported = handle;
  Work w;
  w.action = [cb, data, reported] { cb(reported, CUDA_SUCCESS, data); };
  return SubmitLocked(s, std::move(w), nullptr);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuEventCreate(CUevent* out, unsigned int flags) {
  Context* ctx = nullptr;
  if (CUresult r = CurrentActiveContext(&ctx); r != CUDA_SUCCESS) return r;
  constexpr unsigned kValid =
      CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (out == nullptr || (flags & ~kValid) != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  auto* e = new Event();
  e->ctx = ctx;
  e->flags = flags;
  Driver::Get().events.insert(e);
  *out = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuEventDestroy_v2(CUevent handle) {
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Event* e = nullptr;
  if (CUresult r = ValidEvent(handle, &e); r != CUDA_SUCCESS) return r;
  drv.events.erase(e);
  delete e;  // A pending record keeps its EventState alive.
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuEventRecordWithFlags(CUevent handle, CUstream stream,
                                                           unsigned int flags) {
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Event* e = nullptr;
  if (CUresult r = ValidEvent(handle, &e); r != CUDA_SUCCESS) return r;
  if (flags != 0 && flags != CU_EVENT_RECORD_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = ResolveStreamLocked(stream, &s); r != CUDA_SUCCESS) return r;
  if (s->ctx != e->ctx) return CUDA_ERROR_INVALID_HANDLE;
  if (s->capture_graph != nullptr) return CUDA_SUCCESS;  // Orders capture only.
  Executor* exec = drv.ExecutorFor(s->ctx->device);
  std::shared_ptr<EventState> state = e->state;
  Work w;
  // Stamped where the timeline stands when the executor gets here, unless a
  // query found the record complete on the timeline first and stamped it
  // with the kernel's end (EventCompleteLocked).
  w.action = [state, exec] {
    uint64_t unstamped = 0;
    state->time_ns.compare_exchange_strong(unstamped, exec->cursor_ns(), std::memory_order_acq_rel);
  };
  w.instant = true;
  state->time_ns.store(0, std::memory_order_relaxed);
  CUresult r = SubmitLocked(s, std::move(w), nullptr);
  e->executor = exec;
  e->seq = s->last_seq;
  return r;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuEventRecord(CUevent handle, CUstream stream) {
  return cuEventRecordWithFlags(handle, stream, 0);
}

// Whether `e`'s last record is complete: on the GPU's timeline, as a real
// event is when the work before it ends (Executor::DoneOnTimeline), not when
// the simulator's thread gets around to it. Stamps the record's time then.
static bool EventCompleteLocked(Event* e) {
  if (e->executor == nullptr) return true;
  uint64_t end = 0;
  if (!e->executor->DoneOnTimeline(e->seq, gpuslice::sim::MonotonicNs(), &end)) return false;
  uint64_t unstamped = 0;
  if (end != 0)
    e->state->time_ns.compare_exchange_strong(unstamped, end, std::memory_order_acq_rel);
  return true;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuEventQuery(CUevent handle) {
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Event* e = nullptr;
  if (CUresult r = ValidEvent(handle, &e); r != CUDA_SUCCESS) return r;
  return EventCompleteLocked(e) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuEventSynchronize(CUevent handle) {
  Executor* exec = nullptr;
  uint64_t seq = 0;
  {
    std::lock_guard<DriverMutex> lock(Driver::Get().mu);
    Event* e = nullptr;
    if (CUresult r = ValidEvent(handle, &e); r != CUDA_SUCCESS) return r;
    exec = e->executor;
    seq = e->seq;
  }
  if (exec != nullptr) exec->WaitFor(seq);
  return CUDA_SUCCESS;
}

// cuEventElapsedTime and (CUDA 12.8 on) its _v2 behave the same here.
static CUresult EventElapsedTime(float* ms, CUevent start, CUevent end) {
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Event* a = nullptr;
  Event* b = nullptr;
  if (CUresult r = ValidEvent(start, &a); r != CUDA_SUCCESS) return r;
  if (CUresult r = ValidEvent(end, &b); r != CUDA_SUCCESS) return r;
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (a->executor == nullptr || b->executor == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!EventCompleteLocked(a) || !EventCompleteLocked(b)) return CUDA_ERROR_NOT_READY;
  double t0 = static_cast<double>(a->state->time_ns.load(std::memory_order_acquire));
  double t1 = static_cast<double>(b->state->time_ns.load(std::memory_order_acquire));
  *ms = static_cast<float>((t1 - t0) / 1e6);
  return CUDA_SUCCESS;
}

#if CUDA_VERSION >= 12080
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  return EventElapsedTime(ms, start, end);
}
#endif

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  return EventElapsedTime(ms, start, end);
}

// Entry points with the same signature and behaviour: legacy names whose
// _v2 changed nothing visible here, and the per-thread-default-stream
// variants (the simulator gives every thread the legacy default stream).
GPUSLICE_CU_ALIAS(cuStreamQuery_ptsz, cuStreamQuery)
GPUSLICE_CU_ALIAS(cuStreamSynchronize_ptsz, cuStreamSynchronize)
GPUSLICE_CU_ALIAS(cuStreamWaitEvent_ptsz, cuStreamWaitEvent)
GPUSLICE_CU_ALIAS(cuStreamGetPriority_ptsz, cuStreamGetPriority)
GPUSLICE_CU_ALIAS(cuStreamGetFlags_ptsz, cuStreamGetFlags)
GPUSLICE_CU_ALIAS(cuStreamGetCtx_ptsz, cuStreamGetCtx)
GPUSLICE_CU_ALIAS(cuStreamAddCallback_ptsz, cuStreamAddCallback)
GPUSLICE_CU_ALIAS(cuLaunchHostFunc_ptsz, cuLaunchHostFunc)
GPUSLICE_CU_ALIAS(cuEventRecord_ptsz, cuEventRecord)
GPUSLICE_CU_ALIAS(cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags)
GPUSLICE_CU_ALIAS(cuStreamDestroy, cuStreamDestroy_v2)
GPUSLICE_CU_ALIAS(cuEventDestroy, cuEventDestroy_v2)
