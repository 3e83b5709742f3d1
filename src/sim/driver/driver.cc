#include "sim/driver/driver.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gpuslice::sim::driver {
namespace {

constexpr size_t kAllocGranularity = 2u << 20;  // Charged per allocation, like the driver's pages.

size_t RoundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

// CUDA_VISIBLE_DEVICES: indices or (prefixes of) GPU-/MIG- UUIDs, comma
// separated. As in the real driver, enumeration stops at the first entry
// that matches nothing (or repeats one).
std::vector<uint32_t> VisibleUnits(DeviceModel* model) {
  std::vector<uint32_t> all;
  for (uint32_t u = 0; u < model->unit_count(); ++u) all.push_back(u);
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (env == nullptr) return all;
  std::vector<uint32_t> out;
  std::string list(env);
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string tok =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!tok.empty() && tok.front() == ' ') tok.erase(0, 1);
    while (!tok.empty() && tok.back() == ' ') tok.pop_back();
    int found = -1;
    if (!tok.empty() && tok.find_first_not_of("0123456789") == std::string::npos) {
      unsigned long idx = std::strtoul(tok.c_str(), nullptr, 10);
      if (idx < all.size()) found = static_cast<int>(idx);
    } else if (tok.rfind("GPU-", 0) == 0 || tok.rfind("MIG-", 0) == 0) {
      for (uint32_t u : all) {
        if (model->Unit(u).uuid.rfind(tok, 0) == 0) {
          if (found >= 0) {  // Ambiguous prefix.
            found = -1;
            break;
          }
          found = static_cast<int>(u);
        }
      }
    }
    if (found < 0 || std::find(out.begin(), out.end(), uint32_t(found)) != out.end()) break;
    out.push_back(static_cast<uint32_t>(found));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// How many DriverMutex locks this thread holds (0 or 1: not recursive).
thread_local int tls_mu_held = 0;

}  // namespace

void DriverMutex::lock() {
  mu_.lock();
  if (gate_closed() && !tls_passes_checkpoint_gate) {
    std::unique_lock<std::mutex> held(mu_, std::adopt_lock);
    cv_.wait(held, [this] { return !gate_closed(); });
    held.release();
  }
  ++tls_mu_held;
}

void DriverMutex::unlock() {
  --tls_mu_held;
  mu_.unlock();
}

void DriverMutex::WaitAtGate() {
  if (tls_mu_held > 0 || tls_passes_checkpoint_gate) return;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !gate_closed(); });
}

void DriverMutex::OpenGate() {
  gate_.store(0, std::memory_order_relaxed);
  cv_.notify_all();
}

Driver& Driver::Get() {
  static Driver* driver = new Driver();  // Never destroyed: executors may outlive main().
  return *driver;
}

CUresult Driver::Init() {
  std::lock_guard<std::mutex> lock(init_mu_);
  if (init_done_) return init_result_;
  init_done_ = true;
  core::Result<ModelOptions> options = ModelOptionsFromEnvironment();
  core::Result<std::unique_ptr<DeviceModel>> model =
      options.ok() ? DeviceModel::Open(*options)
                   : core::Result<std::unique_ptr<DeviceModel>>(options.status());
  core::Status registered = model.ok() ? (*model)->Register() : model.status();
  if (!registered.ok()) {
    // The one place the simulator writes to stderr: a broken configuration
    // must be visible, and cuInit's error code cannot carry the reason.
    std::fprintf(stderr, "gpuslice-sim: cuInit failed: %s\n", registered.message().c_str());
    init_result_ = registered.code() == core::StatusCode::kInvalidArgument
                       ? CUDA_ERROR_INVALID_VALUE
                       : CUDA_ERROR_OPERATING_SYSTEM;
    return init_result_;
  }
  model_ = std::move(*model);
  for (uint32_t unit : VisibleUnits(model_.get())) {
    auto d = std::make_unique<Device>();
    d->ordinal = static_cast<int>(devices.size());
    d->unit = unit;
    d->info = model_->Unit(unit);
    d->gpu = model_->Device(d->info.device);
    devices.push_back(std::move(d));
  }
  if (devices.empty()) {
    init_result_ = CUDA_ERROR_NO_DEVICE;
    return init_result_;
  }
  StartCheckpointService();
  initialized_.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

Executor* Driver::ExecutorFor(Device* d) {
  if (!d->executor) d->executor = std::make_unique<Executor>(model_.get(), d->unit);
  return d->executor.get();
}

CUresult ToCuResult(const core::Status& s) {
  switch (s.code()) {
    case core::StatusCode::kOk:
      return CUDA_SUCCESS;
    case core::StatusCode::kResourceExhausted:
      return CUDA_ERROR_OUT_OF_MEMORY;
    case core::StatusCode::kInvalidArgument:
      return CUDA_ERROR_INVALID_VALUE;
    case core::StatusCode::kUnimplemented:
      return CUDA_ERROR_NOT_SUPPORTED;
    default:
      return CUDA_ERROR_UNKNOWN;
  }
}

std::vector<Context*>& ContextStack() {
  thread_local std::vector<Context*> stack;
  return stack;
}

Context* CurrentContext() {
  std::vector<Context*>& s = ContextStack();
  return s.empty() ? nullptr : s.back();
}

CUresult CheckInit() {
  Driver& drv = Driver::Get();
  if (!drv.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (drv.mu.gate_closed()) drv.mu.WaitAtGate();  // Locked for a checkpoint.
  return CUDA_SUCCESS;
}

CUresult ActivateLocked(Context* ctx) {
  if (ctx->active) return CUDA_SUCCESS;
  Driver& drv = Driver::Get();
  CUresult r = ToCuResult(drv.model()->AddContext(ctx->device->unit));
  if (r != CUDA_SUCCESS) return r;
  drv.ExecutorFor(ctx->device);
  ctx->null_stream = new Stream();
  ctx->null_stream->ctx = ctx;
  ctx->active = true;
  return CUDA_SUCCESS;
}

void DeactivateLocked(Context* ctx) {
  if (!ctx->active) return;
  DestroyContextResourcesLocked(ctx);
  delete ctx->null_stream;
  ctx->null_stream = nullptr;
  Driver::Get().model()->RemoveContext(ctx->device->unit);
  ctx->active = false;
}

CUresult CurrentActiveContext(Context** out) {
  CUresult r = CheckInit();
  if (r != CUDA_SUCCESS) return r;
  Context* ctx = CurrentContext();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  if (drv.contexts.count(ctx) == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  r = ActivateLocked(ctx);
  if (r != CUDA_SUCCESS) return r;
  *out = ctx;
  return CUDA_SUCCESS;
}

CUresult LookupDevice(CUdevice ordinal, Device** out) {
  CUresult r = CheckInit();
  if (r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  if (ordinal < 0 || static_cast<size_t>(ordinal) >= drv.devices.size()) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *out = drv.devices[ordinal].get();
  return CUDA_SUCCESS;
}

CUresult ResolveStreamLocked(CUstream handle, Stream** out) {
  Driver& drv = Driver::Get();
  if (handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
    Context* ctx = CurrentContext();
    if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    if (drv.contexts.count(ctx) == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    CUresult r = ActivateLocked(ctx);
    if (r != CUDA_SUCCESS) return r;
    *out = ctx->null_stream;
    return CUDA_SUCCESS;
  }
  Stream* s = reinterpret_cast<Stream*>(handle);
  if (drv.streams.count(s) == 0) return CUDA_ERROR_INVALID_HANDLE;
  *out = s;
  return CUDA_SUCCESS;
}

CUresult AllocateLocked(Context* ctx, size_t bytes, AllocKind kind, MemPool* pool,
                        uintptr_t* base) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes > (size_t{1} << 48)) return CUDA_ERROR_OUT_OF_MEMORY;
  Driver& drv = Driver::Get();
  size_t charged = RoundUp(bytes, kAllocGranularity);
  CUresult r = ToCuResult(drv.model()->ReserveMemory(ctx->device->unit, charged));
  if (r != CUDA_SUCCESS) return r;
  // Device memory is host memory; NORESERVE so a large, untouched
  // allocation costs address space only.
  size_t map_size = RoundUp(bytes, static_cast<size_t>(getpagesize()));
  void* p = mmap(nullptr, map_size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    drv.model()->ReleaseMemory(ctx->device->unit, charged);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // Large pages where the kernel offers them (transparent huge pages in
  // "madvise" mode): a GPU does not fault its memory in 4 KiB at a time,
  // and a copy into fresh memory (a restore) then costs about what the copy
  // does rather than a page fault per 4 KiB. Advice only: ignored elsewhere.
  if (map_size >= (size_t{2} << 20)) (void)madvise(p, map_size, MADV_HUGEPAGE);
  Allocation a;
  a.ctx = ctx;
  a.unit = ctx->device->unit;
  a.kind = kind;
  a.size = bytes;
  a.charged = charged;
  a.mapping = p;
  a.mapping_size = map_size;
  a.pool = pool;
  *base = reinterpret_cast<uintptr_t>(p);
  drv.allocations[*base] = a;
  return CUDA_SUCCESS;
}

void FreeLocked(std::map<uintptr_t, Allocation>::iterator it) {
  Driver& drv = Driver::Get();
  Allocation& a = it->second;
  if (a.mapping != nullptr) munmap(a.mapping, a.mapping_size);
  if (a.charged != 0) drv.model()->ReleaseMemory(a.unit, a.charged);
  drv.allocations.erase(it);
}

std::map<uintptr_t, Allocation>::iterator FindRangeLocked(uintptr_t ptr, size_t bytes) {
  auto& allocs = Driver::Get().allocations;
  auto it = allocs.upper_bound(ptr);
  if (it == allocs.begin()) return allocs.end();
  --it;
  if (ptr + bytes < ptr || ptr + bytes > it->first + it->second.size) return allocs.end();
  if (it->second.no_access || it->second.cached) return allocs.end();
  return it;
}

// "GPU-3f2a...": the 32 hex digits as 16 bytes.
void UuidBytes(const std::string& uuid, CUuuid* out) {
  std::memset(out->bytes, 0, sizeof(out->bytes));
  int n = 0;
  for (size_t i = 4; i < uuid.size() && n < 32; ++i) {
    char c = uuid[i];
    int v = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'f') ? c - 'a' + 10
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                     : -1;
    if (v < 0) continue;
    out->bytes[n / 2] = static_cast<char>(out->bytes[n / 2] | (v << ((n % 2) ? 0 : 4)));
    ++n;
  }
}

uint64_t KernelCostNs(const Launch& launch, void** params, void** extra, uint32_t sm_count) {
  if (launch.func->sleep_kernel) {
    unsigned int us = 0;
    if (params != nullptr && params[0] != nullptr) {
      std::memcpy(&us, params[0], sizeof(us));
    } else if (extra != nullptr) {
      for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END && i < 16; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER && extra[i + 1] != nullptr) {
          std::memcpy(&us, extra[i + 1], sizeof(us));
        }
      }
    }
    return uint64_t{us} * 1000;
  }
  // A launch overhead plus one microsecond per wave of blocks, a wave being
  // as many blocks as the device holds at once (up to 2048 threads and 32
  // blocks per SM).
  uint64_t blocks = uint64_t{launch.grid[0]} * launch.grid[1] * launch.grid[2];
  uint64_t threads = uint64_t{launch.block[0]} * launch.block[1] * launch.block[2];
  uint64_t per_sm =
      std::max<uint64_t>(1, std::min<uint64_t>(32, 2048 / std::max<uint64_t>(1, threads)));
  uint64_t per_wave = per_sm * std::max<uint32_t>(1, sm_count);
  uint64_t waves = (blocks + per_wave - 1) / per_wave;
  return 2000 + waves * 1000;
}

CUresult SubmitLocked(Stream* stream, Work work, const Launch* launch) {
  Driver& drv = Driver::Get();
  if (stream->capture_graph != nullptr) {
    Graph* g = stream->capture_graph;
    auto node = std::make_unique<GraphNode>();
    node->graph = g;
    if (launch != nullptr) {
      node->type = CU_GRAPH_NODE_TYPE_KERNEL;
      node->launch = *launch;
    } else {
      node->type = CU_GRAPH_NODE_TYPE_MEMCPY;
      node->action = std::move(work.action);
    }
    if (!g->nodes.empty()) node->deps.push_back(g->nodes.back().get());
    drv.graph_nodes.insert(node.get());
    g->nodes.push_back(std::move(node));
    return CUDA_SUCCESS;
  }
  Executor* exec = drv.ExecutorFor(stream->ctx->device);
  if (launch != nullptr) drv.model()->CountLaunch(stream->ctx->device->unit);
  stream->last_seq = exec->Submit(std::move(work));
  return CUDA_SUCCESS;
}

CUresult RunSync(const std::function<void()>& action) {
  Context* ctx = nullptr;
  CUresult r = CurrentActiveContext(&ctx);
  if (r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  Executor* exec;
  {
    std::lock_guard<DriverMutex> lock(drv.mu);
    exec = drv.ExecutorFor(ctx->device);
    ++drv.sync_in_flight;  // Past the gate: a lock waits for it.
  }
  exec->RunInOrder(action);
  {
    std::lock_guard<std::mutex> lock(drv.mu.native());  // Never waits at the gate.
    if (--drv.sync_in_flight == 0) drv.mu.cv().notify_all();
  }
  return CUDA_SUCCESS;
}

void DestroyContextResourcesLocked(Context* ctx) {
  Driver& drv = Driver::Get();
  if (ctx->device->executor) {
    // Let queued work finish: its actions may touch memory freed below.
    Executor* exec = ctx->device->executor.get();
    uint64_t last = exec->last_submitted();
    drv.mu.unlock();
    exec->WaitFor(last);
    drv.mu.lock();
  }
  for (auto it = drv.streams.begin(); it != drv.streams.end();) {
    if ((*it)->ctx == ctx) {
      delete *it;
      it = drv.streams.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = drv.events.begin(); it != drv.events.end();) {
    if ((*it)->ctx == ctx) {
      delete *it;
      it = drv.events.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = drv.modules.begin(); it != drv.modules.end();) {
    if ((*it)->ctx == ctx) {
      for (auto& [name, f] : (*it)->functions) {
        drv.functions.erase(f);
        delete f;
      }
      delete *it;
      it = drv.modules.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = drv.arrays.begin(); it != drv.arrays.end();) {
    if ((*it)->ctx == ctx) {
      munmap(reinterpret_cast<void*>((*it)->base), (*it)->bytes);
      drv.model()->ReleaseMemory(ctx->device->unit, (*it)->bytes);
      delete *it;
      it = drv.arrays.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = drv.allocations.begin(); it != drv.allocations.end();) {
    auto next = std::next(it);
    if (it->second.ctx == ctx) FreeLocked(it);
    it = next;
  }
}

}  // namespace gpuslice::sim::driver

// Gives the process's slot back at normal exit; a killed process is reaped
// by the next process that touches the state instead.
__attribute__((destructor)) static void GpusliceSimUnregister() {
  gpuslice::sim::driver::Driver& drv = gpuslice::sim::driver::Driver::Get();
  if (drv.initialized()) drv.model()->Unregister();
}
