#pragma once

// Suspending and resuming a job's GPU state through the CUDA driver's
// process checkpoint API (CUDA 12.8+: cuCheckpointProcessLock, ...Checkpoint,
// ...Restore, ...Unlock, ...GetState), called by the daemon on the job's
// processes by pid. `Checkpointer` is the seam: the driver's calls, one
// process at a time, translated into Status at this one border; the
// sequencing over all of a job's processes (SuspendProcesses,
// ResumeProcesses) is plain logic over it, so tests give a fake.
//
// The calls block (a lock waits for the work in flight, a checkpoint copies
// the process's device memory to host memory): the service runs them on a
// worker thread, never on its event loop (suspend/suspender.cc). A Checkpointer
// must therefore be callable from any thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace gpuslice::daemon {

// CUprocessState, plus "not a CUDA process" (the driver does not know it).
enum class GpuProcessState { kRunning, kLocked, kCheckpointed, kFailed };
std::string_view GpuProcessStateName(GpuProcessState s);

// Restore onto other GPUs: each GPU the process was checkpointed on (UUID,
// "GPU-..."), and the GPU to put it on.
struct GpuRemap {
  std::string from_uuid;
  std::string to_uuid;
};

class Checkpointer {
 public:
  virtual ~Checkpointer() = default;
  // Whether the driver offers the API; kUnimplemented saying why not.
  virtual core::Status Available() = 0;
  // kNotFound: `pid` is not a process the driver knows (no CUDA, or gone).
  virtual core::Result<GpuProcessState> StateOf(int64_t pid) = 0;
  // RUNNING -> LOCKED (waits for the work in flight; at most `timeout_ms`,
  // 0: no limit). kDeadlineExceeded on timeout (the process stays running).
  virtual core::Status Lock(int64_t pid, uint32_t timeout_ms) = 0;
  // LOCKED -> CHECKPOINTED: device memory to host memory, the GPU freed.
  virtual core::Status Checkpoint(int64_t pid) = 0;
  // CHECKPOINTED -> LOCKED, onto the same GPUs or those of `remap` (which
  // must name every GPU the process was on).
  virtual core::Status Restore(int64_t pid, const std::vector<GpuRemap>& remap) = 0;
  // LOCKED -> RUNNING.
  virtual core::Status Unlock(int64_t pid) = 0;
};

// The driver's API, loaded into this process with dlopen on first use from
// the library `library()` names then (libcuda.so.1, or the simulated one:
// which one is known only once the daemon has read its GPUs). Errors name
// the call and the CUresult.
std::unique_ptr<Checkpointer> MakeDriverCheckpointer(std::function<std::string()> library);

// What a whole-job operation did.
struct CheckpointOutcome {
  // The processes it acted on (CUDA processes of the job; the others are
  // not the driver's and are left alone).
  std::vector<int64_t> pids;
  core::Status status;
};

// Suspends a job: locks every CUDA process among `pids` (so none runs on
// while another is being saved), then checkpoints each. On any failure it
// puts back what it did (restores and unlocks) and returns the error with
// the process named; a process that was not running is an error
// (kFailedPrecondition), except processes the driver does not know, which
// are skipped; so is a job with no CUDA process at all.
CheckpointOutcome SuspendProcesses(Checkpointer& cp, const std::vector<int64_t>& pids,
                                   uint32_t lock_timeout_ms);

// Resumes what SuspendProcesses suspended: restores every process among
// `pids` that is checkpointed (onto `remap` when given), then unlocks them
// all. On a failure it checkpoints again those already restored, so the job
// stays wholly suspended, and returns the error. Processes that are gone
// are skipped (the job's end is noticed elsewhere).
CheckpointOutcome ResumeProcesses(Checkpointer& cp, const std::vector<int64_t>& pids,
                                  const std::vector<GpuRemap>& remap);

}  // namespace gpuslice::daemon
