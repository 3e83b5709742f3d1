#include "daemon/launch/checkpointer.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

namespace gpuslice::daemon {
namespace {

// The driver's ABI for these calls, as CUDA 12.8's cuda.h declares it
// (values and layouts are facts of the ABI). Declared here rather than taken
// from cuda.h so that the daemon builds against an older header (Debian's
// CUDA 11.8 has none of it) and finds out at run time, by dlsym, whether the
// installed driver has the API.
using CUresult = int;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_ILLEGAL_STATE = 401;
constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;
constexpr CUresult CUDA_ERROR_NOT_PERMITTED = 800;
constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;
constexpr CUresult CUDA_ERROR_TIMEOUT = 909;

enum CUprocessState : int {
  CU_PROCESS_STATE_RUNNING = 0,
  CU_PROCESS_STATE_LOCKED = 1,
  CU_PROCESS_STATE_CHECKPOINTED = 2,
  CU_PROCESS_STATE_FAILED = 3,
};
struct CUuuid {
  char bytes[16];
};
struct CUcheckpointLockArgs {
  unsigned timeoutMs;
  unsigned reserved0;
  uint64_t reserved1[7];
};
struct CUcheckpointCheckpointArgs {
  uint64_t reserved[8];
};
struct CUcheckpointGpuPair {
  CUuuid oldUuid;
  CUuuid newUuid;
};
struct CUcheckpointRestoreArgs {
  CUcheckpointGpuPair* gpuPairs;
  unsigned gpuPairsCount;
  char reserved[52 - sizeof(CUcheckpointGpuPair*)];
  uint64_t reserved1;
};
struct CUcheckpointUnlockArgs {
  uint64_t reserved[8];
};
static_assert(sizeof(CUcheckpointLockArgs) == 64);
static_assert(sizeof(CUcheckpointCheckpointArgs) == 64);
static_assert(sizeof(CUcheckpointRestoreArgs) == 64);
static_assert(sizeof(CUcheckpointUnlockArgs) == 64);
static_assert(sizeof(CUcheckpointGpuPair) == 32);

}  // namespace

using core::Result;
using core::Status;

std::string_view GpuProcessStateName(GpuProcessState s) {
  switch (s) {
    case GpuProcessState::kRunning:
      return "running";
    case GpuProcessState::kLocked:
      return "locked";
    case GpuProcessState::kCheckpointed:
      return "checkpointed";
    case GpuProcessState::kFailed:
      return "failed";
  }
  return "unknown";
}

namespace {

// The one border between CUresult and Status for the checkpoint calls.
class DriverCheckpointer : public Checkpointer {
 public:
  explicit DriverCheckpointer(std::function<std::string()> library)
      : choose_library_(std::move(library)) {}
  ~DriverCheckpointer() override = default;  // The library stays loaded.

  Status Available() override {
    std::call_once(once_, [this] { load_status_ = Load(); });
    return load_status_;
  }

  Result<GpuProcessState> StateOf(int64_t pid) override {
    GPUSLICE_RETURN_IF_ERROR(Available());
    CUprocessState state = CU_PROCESS_STATE_RUNNING;
    CUresult r = get_state_(static_cast<int>(pid), &state);
    if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_FOUND) {
      return core::NotFoundError("process " + std::to_string(pid) +
                                 " is not a CUDA process the driver knows");
    }
    if (r != CUDA_SUCCESS) return Error("cuCheckpointProcessGetState", pid, r);
    switch (state) {
      case CU_PROCESS_STATE_RUNNING:
        return GpuProcessState::kRunning;
      case CU_PROCESS_STATE_LOCKED:
        return GpuProcessState::kLocked;
      case CU_PROCESS_STATE_CHECKPOINTED:
        return GpuProcessState::kCheckpointed;
      case CU_PROCESS_STATE_FAILED:
        return GpuProcessState::kFailed;
    }
    return core::InternalError("cuCheckpointProcessGetState: unknown state " +
                               std::to_string(static_cast<int>(state)));
  }

  Status Lock(int64_t pid, uint32_t timeout_ms) override {
    GPUSLICE_RETURN_IF_ERROR(Available());
    CUcheckpointLockArgs args;
    std::memset(&args, 0, sizeof(args));
    args.timeoutMs = timeout_ms;
    return Check("cuCheckpointProcessLock", pid, lock_(static_cast<int>(pid), &args));
  }

  Status Checkpoint(int64_t pid) override {
    GPUSLICE_RETURN_IF_ERROR(Available());
    CUcheckpointCheckpointArgs args;
    std::memset(&args, 0, sizeof(args));
    return Check("cuCheckpointProcessCheckpoint", pid, checkpoint_(static_cast<int>(pid), &args));
  }

  Status Restore(int64_t pid, const std::vector<GpuRemap>& remap) override {
    GPUSLICE_RETURN_IF_ERROR(Available());
    std::vector<CUcheckpointGpuPair> pairs;
    for (const GpuRemap& m : remap) {
      CUcheckpointGpuPair p;
      std::memset(&p, 0, sizeof(p));
      GPUSLICE_RETURN_IF_ERROR(ParseUuid(m.from_uuid, &p.oldUuid));
      GPUSLICE_RETURN_IF_ERROR(ParseUuid(m.to_uuid, &p.newUuid));
      pairs.push_back(p);
    }
    CUcheckpointRestoreArgs args;
    std::memset(&args, 0, sizeof(args));
    if (!pairs.empty()) {
      args.gpuPairs = pairs.data();
      args.gpuPairsCount = static_cast<unsigned>(pairs.size());
    }
    return Check("cuCheckpointProcessRestore", pid, restore_(static_cast<int>(pid), &args));
  }

  Status Unlock(int64_t pid) override {
    GPUSLICE_RETURN_IF_ERROR(Available());
    CUcheckpointUnlockArgs args;
    std::memset(&args, 0, sizeof(args));
    return Check("cuCheckpointProcessUnlock", pid, unlock_(static_cast<int>(pid), &args));
  }

 private:
  Status Load() {
    library_ = choose_library_();
    void* h = dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      return core::UnimplementedError("cannot load the CUDA driver " + library_ + ": " + dlerror());
    }
    auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(h, "cuInit"));
    error_name_ = reinterpret_cast<ErrorNameFn>(dlsym(h, "cuGetErrorName"));
    get_state_ = reinterpret_cast<GetStateFn>(dlsym(h, "cuCheckpointProcessGetState"));
    lock_ = reinterpret_cast<LockFn>(dlsym(h, "cuCheckpointProcessLock"));
    checkpoint_ = reinterpret_cast<CheckpointFn>(dlsym(h, "cuCheckpointProcessCheckpoint"));
    restore_ = reinterpret_cast<RestoreFn>(dlsym(h, "cuCheckpointProcessRestore"));
    unlock_ = reinterpret_cast<UnlockFn>(dlsym(h, "cuCheckpointProcessUnlock"));
    if (init == nullptr || get_state_ == nullptr || lock_ == nullptr || checkpoint_ == nullptr ||
        restore_ == nullptr || unlock_ == nullptr) {
      return core::UnimplementedError(
          "the CUDA driver " + library_ +
          " has no process checkpoint API (cuCheckpointProcess*: NVIDIA driver 570 or later)");
    }
    if (CUresult r = init(0); r != CUDA_SUCCESS) {
      return core::UnimplementedError("cuInit failed in the daemon: " + Name(r));
    }
    return Status::Ok();
  }

  std::string Name(CUresult r) const {
    const char* name = nullptr;
    if (error_name_ != nullptr && error_name_(r, &name) == CUDA_SUCCESS && name != nullptr) {
      return std::string(name) + " (" + std::to_string(static_cast<int>(r)) + ")";
    }
    return "CUresult " + std::to_string(static_cast<int>(r));
  }

  Status Error(const char* call, int64_t pid, CUresult r) const {
    std::string m = std::string(call) + " on process " + std::to_string(pid) + ": " + Name(r);
    switch (r) {
      case CUDA_ERROR_ILLEGAL_STATE:
        return core::FailedPreconditionError(m);
      case CUDA_ERROR_NOT_READY:
      case CUDA_ERROR_TIMEOUT:
        return core::DeadlineExceededError(m);
      case CUDA_ERROR_OUT_OF_MEMORY:
        return core::ResourceExhaustedError(m);
      case CUDA_ERROR_NOT_PERMITTED:
        return core::PermissionDeniedError(m);
      case CUDA_ERROR_NOT_SUPPORTED:
        return core::UnimplementedError(m);
      case CUDA_ERROR_INVALID_VALUE:
      case CUDA_ERROR_NOT_FOUND:
        return core::NotFoundError(m);
      default:
        return core::InternalError(m);
    }
  }
  Status Check(const char* call, int64_t pid, CUresult r) const {
    return r == CUDA_SUCCESS ? Status::Ok() : Error(call, pid, r);
  }

  // "GPU-6f1b2c3d-...": 32 hex digits after the prefix, dashes anywhere.
  static Status ParseUuid(const std::string& text, CUuuid* out) {
    std::string_view t = text;
    if (t.rfind("GPU-", 0) == 0 || t.rfind("MIG-", 0) == 0) t.remove_prefix(4);
    size_t n = 0;
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    int high = -1;
    for (char c : t) {
      if (c == '-') continue;
      int v = hex(c);
      if (v < 0 || n == 16) break;
      if (high < 0) {
        high = v;
      } else {
        out->bytes[n++] = static_cast<char>(high << 4 | v);
        high = -1;
      }
    }
    if (n != 16 || high >= 0) {
      return core::InvalidArgumentError("'" + text + "' is not a GPU UUID (GPU-<32 hex digits>)");
    }
    return Status::Ok();
  }

  using ErrorNameFn = CUresult (*)(CUresult, const char**);
  using GetStateFn = CUresult (*)(int, CUprocessState*);
  using LockFn = CUresult (*)(int, CUcheckpointLockArgs*);
  using CheckpointFn = CUresult (*)(int, CUcheckpointCheckpointArgs*);
  using RestoreFn = CUresult (*)(int, CUcheckpointRestoreArgs*);
  using UnlockFn = CUresult (*)(int, CUcheckpointUnlockArgs*);

  const std::function<std::string()> choose_library_;
  std::string library_;  // Set once, by Load.
  std::once_flag once_;
  Status load_status_;
  ErrorNameFn error_name_ = nullptr;
  GetStateFn get_state_ = nullptr;
  LockFn lock_ = nullptr;
  CheckpointFn checkpoint_ = nullptr;
  RestoreFn restore_ = nullptr;
  UnlockFn unlock_ = nullptr;
};

}  // namespace

std::unique_ptr<Checkpointer> MakeDriverCheckpointer(std::function<std::string()> library) {
  return std::make_unique<DriverCheckpointer>(std::move(library));
}

CheckpointOutcome SuspendProcesses(Checkpointer& cp, const std::vector<int64_t>& pids,
                                   uint32_t lock_timeout_ms) {
  CheckpointOutcome out;
  if (Status s = cp.Available(); !s.ok()) {
    out.status = s;
    return out;
  }
  std::vector<int64_t> locked, saved;
  // Puts back what was done, newest first, so the job runs on as before.
  auto undo = [&] {
    for (int64_t pid : saved) {
      (void)cp.Restore(pid, {});
    }
    for (int64_t pid : locked) (void)cp.Unlock(pid);
  };
  for (int64_t pid : pids) {
    Result<GpuProcessState> st = cp.StateOf(pid);
    if (!st.ok() && st.status().code() == core::StatusCode::kNotFound) continue;  // Not CUDA.
    if (!st.ok()) {
      undo();
      out.status = st.status();
      return out;
    }
    if (*st != GpuProcessState::kRunning) {
      undo();
      out.status = core::FailedPreconditionError("process " + std::to_string(pid) + " is " +
                                                 std::string(GpuProcessStateName(*st)) +
                                                 ", not running: it cannot be suspended");
      return out;
    }
    if (Status s = cp.Lock(pid, lock_timeout_ms); !s.ok()) {
      // Locked all the same: a lock asked for before a daemon restart (the
      // driver carries out a lock whose requester died) landed between the
      // state read and this lock. Taken as this suspension's, so that it is
      // unlocked if the suspension fails rather than left locked for good.
      Result<GpuProcessState> now = cp.StateOf(pid);
      if (!now.ok() || *now != GpuProcessState::kLocked) {
        undo();
        out.status = s;
        return out;
      }
    }
    locked.push_back(pid);
  }
  if (locked.empty()) {
    // Nothing on the GPU to save. "Suspended", it would keep running on the
    // CPU and find no memory once it starts CUDA: refused, so that the
    // caller's fallback (end, pause) applies instead.
    out.status = core::FailedPreconditionError(
        "it has no CUDA process to suspend (the driver knows none of its " +
        std::to_string(pids.size()) + " processes)");
    return out;
  }
  for (int64_t pid : locked) {
    if (Status s = cp.Checkpoint(pid); !s.ok()) {
      undo();
      out.status = s;
      return out;
    }
    saved.push_back(pid);
  }
  out.pids = locked;
  return out;
}

CheckpointOutcome ResumeProcesses(Checkpointer& cp, const std::vector<int64_t>& pids,
                                  const std::vector<GpuRemap>& remap) {
  CheckpointOutcome out;
  if (Status s = cp.Available(); !s.ok()) {
    out.status = s;
    return out;
  }
  std::vector<int64_t> restored;
  std::vector<GpuRemap> back;
  for (const GpuRemap& m : remap) back.push_back({m.to_uuid, m.from_uuid});
  auto undo = [&] {
    for (int64_t pid : restored) {
      (void)cp.Checkpoint(pid);
      // Restored onto other GPUs: back onto its own, where the caller puts
      // its slice back too.
      if (!back.empty() && cp.Restore(pid, back).ok()) (void)cp.Checkpoint(pid);
    }
  };
  std::vector<int64_t> to_unlock;
  for (int64_t pid : pids) {
    Result<GpuProcessState> st = cp.StateOf(pid);
    if (!st.ok() && st.status().code() == core::StatusCode::kNotFound) continue;  // Gone.
    if (!st.ok()) {
      undo();
      out.status = st.status();
      return out;
    }
    if (*st == GpuProcessState::kLocked) {
      // Restored already (a resume cut short by a daemon restart).
      to_unlock.push_back(pid);
      continue;
    }
    if (*st != GpuProcessState::kCheckpointed) {
      if (*st == GpuProcessState::kRunning) continue;  // Never suspended, or resumed by itself.
      undo();
      out.status = core::FailedPreconditionError("process " + std::to_string(pid) + " is " +
                                                 std::string(GpuProcessStateName(*st)) +
                                                 ": its GPU state cannot be restored");
      return out;
    }
    if (Status s = cp.Restore(pid, remap); !s.ok()) {
      undo();
      out.status = s;
      return out;
    }
    restored.push_back(pid);
    to_unlock.push_back(pid);
  }
  for (int64_t pid : to_unlock) {
    if (Status s = cp.Unlock(pid); !s.ok() && out.status.ok()) out.status = s;
  }
  out.pids = to_unlock;
  return out;
}

}  // namespace gpuslice::daemon
