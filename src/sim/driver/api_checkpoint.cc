// CUDA's checkpoint API, the requester's side (docs/SIMULATOR.md,
// "Checkpoint and restore"): called in any initialised process about a
// target process by pid; the target's service thread (checkpoint.cc) does
// the work and answers through the state file (sim/checkpoint_channel.h).

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "slice/base/pid_namespace.h"
#include "sim/checkpoint_channel.h"
#include "sim/driver/driver.h"

// cuda.h declares the checkpoint API from CUDA 12.8 on.
#if CUDA_VERSION >= 12080

using namespace gpuslice::sim::driver;  // NOLINT: entry points are extern "C".
using gpuslice::sim::CheckpointChannel;
using gpuslice::sim::CheckpointRequest;
using gpuslice::sim::CheckpointTarget;
namespace layout = gpuslice::sim::layout;

namespace {

template <typename T>
bool AllZero(const T& v) {
  const auto* p = reinterpret_cast<const unsigned char*>(&v);
  for (size_t i = 0; i < sizeof(v); ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

// The process the caller names `pid`, if it uses the simulated GPU and the
// caller may act on it (root, or the same user).
CUresult Resolve(int pid, CheckpointTarget* out) {
  Driver& drv = Driver::Get();
  // Not CheckInit: a requester never waits at its own checkpoint gate.
  if (!drv.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (pid <= 0) return CUDA_ERROR_INVALID_VALUE;
  CheckpointChannel channel(drv.model());
  gpuslice::core::Result<CheckpointTarget> target = channel.Find(pid);
  if (!target.ok()) return CUDA_ERROR_INVALID_VALUE;
  struct stat st;
  if (stat(("/proc/" + std::to_string(pid)).c_str(), &st) != 0) return CUDA_ERROR_INVALID_VALUE;
  const uid_t me = geteuid();
  if (me != 0 && me != st.st_uid) return CUDA_ERROR_NOT_PERMITTED;
  if (channel.ServiceTid(*target) == 0) return CUDA_ERROR_NOT_SUPPORTED;  // An older driver.
  *out = *target;
  return CUDA_SUCCESS;
}

CUresult Call(int pid, const CheckpointRequest& request) {
  CheckpointTarget target;
  if (CUresult r = Resolve(pid, &target); r != CUDA_SUCCESS) return r;
  CheckpointChannel channel(Driver::Get().model());
  gpuslice::core::Result<uint32_t> answer = channel.Call(target, request);
  if (answer.ok()) return static_cast<CUresult>(*answer);
  // The target did not take up a lock in time (stopped?): as a lock that
  // timed out. Otherwise it exited: no longer a CUDA process.
  return answer.status().code() == gpuslice::core::StatusCode::kDeadlineExceeded
             ? CUDA_ERROR_NOT_READY
             : CUDA_ERROR_INVALID_VALUE;
}

// The unit whose UUID (cuDeviceGetUuid_v2's bytes: a whole GPU's GPU-, a
// MIG instance's MIG- UUID) is `uuid`; -1 if none.
int UnitOf(const CUuuid& uuid) {
  gpuslice::sim::DeviceModel* model = Driver::Get().model();
  for (uint32_t u = 0; u < model->unit_count(); ++u) {
    CUuuid b;
    UuidBytes(model->Unit(u).uuid, &b);
    if (std::memcmp(b.bytes, uuid.bytes, sizeof(b.bytes)) == 0) return static_cast<int>(u);
  }
  return -1;
}

// The thread `tid` of the target's namespace, as the caller names it.
int VisibleTid(const CheckpointTarget& target, pid_t ns_tid) {
  const layout::ProcessSlot& s = Driver::Get().model()->state()->slots[target.slot];
  if (s.pid_ns == 0 || s.pid_ns == gpuslice::slice::OwnPidNamespace()) return ns_tid;
  // /proc/<pid>/task/<tid>/status's NSpid line ends with the tid in the
  // thread's own namespace.
  std::string dir = "/proc/" + std::to_string(target.pid) + "/task";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  int found = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    FILE* f = std::fopen((dir + "/" + e->d_name + "/status").c_str(), "r");
    if (f == nullptr) continue;
    char line[256];
    while (std::fgets(line, sizeof(line), f) != nullptr) {
      if (std::strncmp(line, "NSpid:", 6) != 0) continue;
      const char* last = std::strrchr(line, '\t');
      if (last != nullptr && std::atoi(last + 1) == ns_tid) found = std::atoi(e->d_name);
      break;
    }
    std::fclose(f);
    if (found != 0) break;
  }
  closedir(d);
  return found;
}

}  // namespace

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCheckpointProcessGetState(int pid, CUprocessState* state) {
  CheckpointTarget target;
  if (CUresult r = Resolve(pid, &target); r != CUDA_SUCCESS) return r;
  if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *state = static_cast<CUprocessState>(CheckpointChannel(Driver::Get().model()).State(target));
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCheckpointProcessGetRestoreThreadId(int pid, int* tid) {
  CheckpointTarget target;
  if (CUresult r = Resolve(pid, &target); r != CUDA_SUCCESS) return r;
  if (tid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int visible = VisibleTid(target, CheckpointChannel(Driver::Get().model()).ServiceTid(target));
  if (visible == 0) return CUDA_ERROR_INVALID_VALUE;
  *tid = visible;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCheckpointProcessLock(int pid, CUcheckpointLockArgs* args) {
  if (!Driver::Get().initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CheckpointRequest req;
  req.op = layout::kCkptOpLock;
  if (args != nullptr) {
    CUcheckpointLockArgs rest = *args;
    rest.timeoutMs = 0;
    if (!AllZero(rest)) return CUDA_ERROR_INVALID_VALUE;
    req.timeout_ms = args->timeoutMs;
  }
  return Call(pid, req);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI
cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs* args) {
  if (!Driver::Get().initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (args != nullptr && !AllZero(*args)) return CUDA_ERROR_INVALID_VALUE;
  CheckpointRequest req;
  req.op = layout::kCkptOpCheckpoint;
  return Call(pid, req);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCheckpointProcessRestore(int pid,
                                                               CUcheckpointRestoreArgs* args) {
  if (!Driver::Get().initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CheckpointRequest req;
  req.op = layout::kCkptOpRestore;
  if (args != nullptr) {
#if CUDA_VERSION >= 13000
    CUcheckpointRestoreArgs rest = *args;
    rest.gpuPairs = nullptr;
    rest.gpuPairsCount = 0;
    if (!AllZero(rest)) return CUDA_ERROR_INVALID_VALUE;
    if (args->gpuPairsCount > 0 && args->gpuPairs == nullptr) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < args->gpuPairsCount; ++i) {
      int from = UnitOf(args->gpuPairs[i].oldUuid), to = UnitOf(args->gpuPairs[i].newUuid);
      if (from < 0 || to < 0) return CUDA_ERROR_INVALID_VALUE;  // No such GPU.
      for (const auto& [f, t] : req.pairs) {
        if (f == uint32_t(from)) return CUDA_ERROR_INVALID_VALUE;  // Named twice.
      }
      req.pairs.emplace_back(from, to);
    }
#else
    if (!AllZero(*args)) return CUDA_ERROR_INVALID_VALUE;
#endif
  }
  return Call(pid, req);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuCheckpointProcessUnlock(int pid,
                                                              CUcheckpointUnlockArgs* args) {
  if (!Driver::Get().initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (args != nullptr && !AllZero(*args)) return CUDA_ERROR_INVALID_VALUE;
  CheckpointRequest req;
  req.op = layout::kCkptOpUnlock;
  return Call(pid, req);
}

#endif  // CUDA_VERSION >= 12080
