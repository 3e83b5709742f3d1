#pragma once

// Internal state of the simulated CUDA driver (one per process). Every
// exported cu* function validates its handles against the tables here and
// reports errors the way the real driver does. Handles given to the
// application are pointers to the objects below.
//
// Locking: `Driver::mu` guards the object tables and the objects' mutable
// fields; it is never held while waiting for an executor. It is also the
// checkpoint gate (DriverMutex): while the process is locked by
// cuCheckpointProcessLock, API threads wait for it (checkpoint.h).

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "sim/device_model.h"
#include "sim/driver/executor.h"

// Exported entry points carry default visibility; everything else is hidden.
#define GPUSLICE_CU_EXPORT extern "C" __attribute__((visibility("default")))
// `symbol` is another name for `target` (defined above in the same file).
#define GPUSLICE_CU_ALIAS(symbol, target) \
  extern "C" __attribute__((visibility("default"), alias(#target))) decltype(target) symbol;

namespace gpuslice::sim::driver {

struct Context;
struct Stream;
struct Graph;

// Per CUDA device ordinal (after CUDA_VISIBLE_DEVICES).
struct Device {
  int ordinal = 0;
  uint32_t unit = 0;
  UnitInfo info;
  DeviceInfo gpu;                      // The physical GPU the unit belongs to.
  std::unique_ptr<Executor> executor;  // Created with the first context.
  Context* primary = nullptr;
  unsigned primary_flags = 0;
  struct MemPool* default_pool = nullptr;
  struct MemPool* current_pool = nullptr;
};

struct Context {
  Device* device = nullptr;
  unsigned flags = 0;
  bool primary = false;
  int primary_refs = 0;  // Primary only.
  bool active = false;   // Holds its memory charge and resources.
  Stream* null_stream = nullptr;
};

struct Stream {
  Context* ctx = nullptr;
  unsigned flags = 0;
  int priority = 0;
  uint64_t last_seq = 0;  // Last work submitted on this stream.
  // Stream capture: launches go into `capture_graph` instead of running.
  Graph* capture_graph = nullptr;
  bool capture_invalidated = false;
  CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
};

struct EventState {
  std::atomic<uint64_t> time_ns{0};  // Simulated completion time of the last record.
};

struct Event {
  Context* ctx = nullptr;
  unsigned flags = 0;
  Executor* executor = nullptr;  // Of the last record; null if never recorded.
  uint64_t seq = 0;
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

enum class AllocKind { kDevice, kManaged, kPool, kArray, kPhysical };

struct Allocation {
  Context* ctx = nullptr;
  uint32_t unit = 0;
  AllocKind kind = AllocKind::kDevice;
  size_t size = 0;          // Usable bytes.
  size_t charged = 0;       // Bytes charged to the device model.
  void* mapping = nullptr;  // mmap'd host memory backing it.
  size_t mapping_size = 0;
  struct MemPool* pool = nullptr;
  bool cached = false;     // Freed into its pool's cache: still charged, not usable.
  bool no_access = false;  // A VMM mapping before cuMemSetAccess.
};

// A VMM physical allocation (cuMemCreate): a memfd, charged to its unit.
struct Physical {
  int fd = -1;
  size_t size = 0;
  uint32_t unit = 0;
  int mappings = 0;
  bool released = false;  // cuMemRelease called; freed when the last mapping goes.
};

struct MemPool {
  Device* device = nullptr;
  bool is_default = false;
  uint64_t release_threshold = 0;
  uint64_t reserved = 0, reserved_high = 0, used = 0, used_high = 0;
  int reuse_follow_event = 1, reuse_opportunistic = 1, reuse_internal = 1;
  std::multimap<size_t, uintptr_t> cache;  // Freed blocks kept reserved: size -> base.
};

struct Array {
  Context* ctx = nullptr;
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  uintptr_t base = 0;
  size_t bytes = 0;
};

struct Module {
  Context* ctx = nullptr;
  std::set<std::string> entries;  // Kernel names found in PTX; empty: accept any name.
  std::map<std::string, struct Function*> functions;
};

struct Function {
  Module* module = nullptr;
  std::string name;
  bool sleep_kernel = false;  // sim_sleep_us: runs for its first parameter in us.
  int max_dynamic_shared = 48 * 1024;
};

// A kernel launch, as run or as recorded in a graph.
struct Launch {
  Function* func = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_mem = 0;
  uint64_t cost_ns = 0;
};

struct GraphNode {
  Graph* graph = nullptr;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  Launch launch;                 // Kernel nodes.
  std::function<void()> action;  // Memcpy/memset nodes captured from streams.
  std::vector<GraphNode*> deps;
};

struct Graph {
  std::vector<std::unique_ptr<GraphNode>> nodes;
};

struct GraphExec {
  std::vector<GraphNode> order;  // Topologically sorted copies.
  Context* ctx = nullptr;
};

// Driver::mu, and the checkpoint gate. While the gate is closed (the process
// is LOCKED or CHECKPOINTED, or a lock is being taken), a thread that locks
// the mutex, or enters the API through CheckInit, waits until it opens: on a
// condition variable, never spinning. Threads that run the GPU's work
// (executors) and the checkpoint service thread pass
// (tls_passes_checkpoint_gate), so that work already submitted completes. A
// thread that holds the mutex already does not wait in CheckInit.
class DriverMutex {
 public:
  void lock();
  void unlock();
  // The plain mutex, for the gate's owner and for bookkeeping that must not
  // wait at the gate (RunSync's in-flight count).
  std::mutex& native() { return mu_; }

  // The API's fast path: one relaxed load. Relaxed is enough: a thread that
  // reads "open" late still meets the gate when it locks the mutex, under
  // which the gate is closed.
  bool gate_closed() const { return gate_.load(std::memory_order_relaxed) != 0; }
  // Waits while the gate is closed, unless this thread passes or holds the
  // mutex (CheckInit's slow path).
  void WaitAtGate();
  // Close and Open: caller holds native(). Open wakes the waiters.
  void CloseGate() { gate_.store(1, std::memory_order_relaxed); }
  void OpenGate();
  // Waiters for the gate and for RunSync's in-flight count share it.
  std::condition_variable& cv() { return cv_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint32_t> gate_{0};
};

class Driver {
 public:
  static Driver& Get();

  // cuInit: opens the device model (once) and enumerates devices.
  CUresult Init();
  bool initialized() const { return initialized_.load(std::memory_order_acquire); }
  DeviceModel* model() { return model_.get(); }

  DriverMutex mu;
  std::vector<std::unique_ptr<Device>> devices;
  std::unordered_set<Context*> contexts;
  std::unordered_set<Stream*> streams;
  std::unordered_set<Event*> events;
  std::unordered_set<Module*> modules;
  std::unordered_set<Function*> functions;
  std::unordered_set<Array*> arrays;
  std::unordered_set<MemPool*> pools;
  std::unordered_set<Graph*> graphs;
  std::unordered_set<GraphNode*> graph_nodes;
  std::unordered_set<GraphExec*> graph_execs;
  std::map<uintptr_t, Allocation> allocations;  // By base address.
  std::unordered_set<Physical*> physicals;
  // Synchronous copies and memsets past the gate and not yet done (they run
  // outside mu); guarded by mu.native(). A lock waits for them.
  int sync_in_flight = 0;

  // Executor of a device, created on first use.
  Executor* ExecutorFor(Device* d);

 private:
  std::atomic<bool> initialized_{false};
  std::mutex init_mu_;
  CUresult init_result_ = CUDA_SUCCESS;
  bool init_done_ = false;
  std::unique_ptr<DeviceModel> model_;
};

// Translates a model Status into the CUresult the real driver would give.
CUresult ToCuResult(const core::Status& s);

// Current-context stack of the calling thread.
std::vector<Context*>& ContextStack();
Context* CurrentContext();

// Common entry checks. Each returns CUDA_SUCCESS or the error to return.
// CheckInit also waits while the process is locked for a checkpoint.
CUresult CheckInit();
// The current context (activating an inactive primary), or an error.
CUresult CurrentActiveContext(Context** out);
CUresult LookupDevice(CUdevice ordinal, Device** out);
// Resolves a stream handle (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a
// created stream) in the current context. Caller holds Driver::mu.
CUresult ResolveStreamLocked(CUstream handle, Stream** out);
CUresult ActivateLocked(Context* ctx);
void DeactivateLocked(Context* ctx);

// Allocation helpers (caller holds Driver::mu).
CUresult AllocateLocked(Context* ctx, size_t bytes, AllocKind kind, MemPool* pool, uintptr_t* base);
void FreeLocked(std::map<uintptr_t, Allocation>::iterator it);
// The allocation containing [ptr, ptr + bytes), or end().
std::map<uintptr_t, Allocation>::iterator FindRangeLocked(uintptr_t ptr, size_t bytes);

// Submits `work` on `stream` (or records it when capturing). Caller holds
// Driver::mu.
CUresult SubmitLocked(Stream* stream, Work work, const Launch* launch);
// Synchronous operation in stream order on the legacy stream of the current
// context.
CUresult RunSync(const std::function<void()>& action);
// Waits for the stream's work. Called without Driver::mu.
CUresult SynchronizeStream(CUstream handle);

// "GPU-3f2a..." / "MIG-...": the 32 hex digits as cuDeviceGetUuid's 16 bytes.
void UuidBytes(const std::string& uuid, CUuuid* out);

// Kernel cost model (docs/SIMULATOR.md).
uint64_t KernelCostNs(const Launch& launch, void** params, void** extra, uint32_t sm_count);

// Starts the thread that serves checkpoint requests of other processes
// (checkpoint.cc). Called once by Driver::Init after registration.
void StartCheckpointService();

// Frees what a context owns (streams, events, modules, memory).
void DestroyContextResourcesLocked(Context* ctx);

// The CUDA_ERROR_NOT_SUPPORTED stub for `name`, an entry point of cuda.h
// the simulator does not implement, as cuGetProcAddress names it (no
// version or per-thread suffix); null when cuda.h has no such entry point
// or it is implemented (api_stubs.cc).
void* FindStub(const char* name, bool per_thread);

}  // namespace gpuslice::sim::driver
