#pragma once

// A job as the daemon, the CLI and the ledger see it: who asked, for what,
// what to run, and where it stands. Plain data plus the pure rules about it
// (legal state transitions, how the request fields a user typed become a
// ResourceRequest). No I/O here: the ledger stores it, the daemon acts on it.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/jobs/request.h"
#include "core/status.h"

namespace gpuslice::core {

// The life of a job. Queued, running and suspended are live; the rest are
// terminal.
//
//   queued ──> running ──> exited     (all its processes ended; exit code kept)
//     ▲ │       │ ▲ ├────> cancelled  (a user or admin ended it, or preempted)
//     │ │       │ │ ├────> timed_out  (ran past its maximum run time)
//     │ │       │ │ ├────> failed     (could not be launched, or was lost)
//     │ │       │ │ └────> queued     (preempted and restartable: runs again)
//     │ │       ▼ │
//     │ │    suspended ──> exited, cancelled, timed_out, failed
//     │ │                 (GPU state checkpointed to host memory: its
//     │ │                 processes live on but hold no GPU; resumed back
//     │ │                 to running)
//     ├──> cancelled
//     └──> failed                     (e.g. no longer fits after GPUs vanished)
enum class JobState { kQueued, kRunning, kExited, kCancelled, kTimedOut, kFailed, kSuspended };

std::string_view JobStateName(JobState state);
Result<JobState> ParseJobState(std::string_view name);
bool IsTerminal(JobState state);
// Whether `from` -> `to` is an edge of the diagram above.
bool CanTransition(JobState from, JobState to);

// How the job's processes are run.
//   kRun:    started by the daemon; the CLI streams its output and exits with
//            its exit code (`gpuslice run`).
//   kSubmit: started by the daemon, detached; output kept for `gpuslice logs`.
//   kShell:  the CLI itself starts an interactive shell (`gpuslice shell`) or
//            the command (`gpuslice run -i`) in the slice once the allocation
//            is granted and tells the daemon its pid: a terminal cannot be
//            handed across the socket cleanly.
//   kExternal: the daemon launches nothing: it holds a slice for processes
//            someone else starts (a Kubernetes container through the device
//            plugin, a Slurm step) and ends when that someone releases it
//            (docs/KUBERNETES.md). Never queued: placed at once or refused.
enum class JobMode { kRun, kSubmit, kShell, kExternal };
std::string_view JobModeName(JobMode mode);
Result<JobMode> ParseJobMode(std::string_view name);

// A queued job kept from starting (`gpuslice hold`, Slurm's `scontrol hold`)
// until it is released: by its owner when the owner held it; only by an
// admin when an admin held someone else's job (as Slurm's admin hold).
enum class HoldKind { kNone, kUser, kAdmin };
std::string_view HoldKindName(HoldKind hold);  // "", "user", "admin"
Result<HoldKind> ParseHoldKind(std::string_view name);

// What a job holds while it runs: GPUs by index and UUID, the memory limit on
// each and the compute share. For a MIG job `gpu_uuids` holds the MIG UUID.
struct Allocation {
  std::vector<uint32_t> gpu_indices;
  std::vector<std::string> gpu_uuids;
  uint64_t memory_bytes_per_gpu = 0;
  uint32_t compute_milli = 0;  // 0: no compute cap.

  bool empty() const { return gpu_indices.empty(); }
  friend bool operator==(const Allocation&, const Allocation&) = default;
};

// A job this one waits for (`--after 12` / `--after 12:ok`); the rules are
// in dependency.h.
enum class DependencyKind {
  kAny,  // "12" (or "12:any"): once job 12 has ended, however it ended.
  kOk,   // "12:ok": once job 12 exited with code 0; any other end breaks it.
};
struct Dependency {
  uint64_t job_id = 0;
  DependencyKind kind = DependencyKind::kAny;
  friend bool operator==(const Dependency&, const Dependency&) = default;
};

struct Job {
  uint64_t id = 0;
  // Owner, from the caller's credentials (never from the request body).
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string user;

  ResourceRequest request;
  JobMode mode = JobMode::kSubmit;
  std::vector<std::string> argv;  // kShell: empty for a shell, the command for run -i.
  std::string cwd;
  std::vector<std::string> env;  // "KEY=value" entries, as the caller had them.

  JobState state = JobState::kQueued;
  int64_t submitted_ms = 0;  // Unix epoch milliseconds.
  int64_t started_ms = 0;
  int64_t ended_ms = 0;
  int exit_code = -1;  // For kExited: the exit status, or 128+signal.
  std::string reason;  // Why it failed, was cancelled, or what it waits for.

  Allocation allocation;
  // The process group leader and its start time (clock ticks since boot, from
  // /proc/PID/stat), so a reused pid is never mistaken for the job.
  int64_t pid = 0;
  uint64_t pid_start_time = 0;
  std::string region_path;
  // Preemption may end it and queue it again (`--restartable`); otherwise a
  // preempted job ends cancelled.
  bool restartable = false;
  // Idle reclaim leaves it alone (`--no-idle-reclaim`: a latency-sensitive
  // service that is idle between requests; docs/DAEMON.md, "Idle reclaim").
  bool no_idle_reclaim = false;
  // Time its GPU use stayed below the daemon's idle threshold while it ran
  // (sampled once a second; accounting's "idle hours").
  int64_t idle_ms = 0;
  // Jobs that must end (kAny) or exit 0 (kOk) before this one may start;
  // fixed at submission, sorted by id.
  std::vector<Dependency> after;
  // A container job (`--image`): the image its command runs in and the
  // engine ("podman" or "docker") that runs it; image "" = a host job.
  std::string image;
  std::string engine;
  // Free-form key -> value pairs the submitter attaches (ValidateLabels):
  // the device plugin's `namespace`, `pod`, `container`, which the metrics
  // carry as labels of the job's series.
  std::map<std::string, std::string> labels;
  // An external job bound to the process that asked for it (`bound_to_caller`:
  // a Slurm step's slurmstepd): released when that process is gone, however
  // it ended. 0 = not bound. Never signalled: it is not the job's own.
  int64_t holder_pid = 0;
  uint64_t holder_start_time = 0;
  // Suspension (docs/SUSPEND.md): when the current suspension began (0:
  // not suspended) and the time spent suspended before it.
  int64_t suspended_since_ms = 0;
  int64_t suspended_total_ms = 0;
  // Suspended by preemption: the daemon resumes it once its GPUs have room.
  bool resume_when_fits = false;
  // Held while queued: the planner passes it by until it is released.
  HoldKind hold = HoldKind::kNone;

  bool IsLive() const { return !IsTerminal(state); }
  // When it must end, if it has a maximum run time and has started; none
  // while it is suspended (time suspended does not count against it).
  std::optional<int64_t> DeadlineMs() const;
};

// Labels (Job::labels): at most kMaxLabels; keys of 1-63 letters, digits,
// '_', '.', '-', '/'; values of at most 253 printable ASCII characters
// without '"' or a backslash. Errors name the key.
inline constexpr size_t kMaxLabels = 32;
inline constexpr size_t kMaxLabelKey = 63;
inline constexpr size_t kMaxLabelValue = 253;
Status ValidateLabels(const std::map<std::string, std::string>& labels);

// The request fields as a user types them (CLI flags or JSON strings). Exactly
// one of gpus / mem / mig chooses the kind; `compute` goes with `mem`.
struct RequestFields {
  std::optional<std::string> gpus;          // "2", "1-4"
  std::optional<std::string> mem;           // "8GiB"
  std::optional<std::string> compute;       // "30%"
  std::optional<std::string> compute_mode;  // hard | work-conserving (with compute)
  std::optional<std::string> mig;           // "1g.10gb"
  std::optional<std::string> priority;      // low|normal|high
  std::optional<std::string> name;
  std::optional<std::string> max_runtime;  // "2h"
  std::optional<std::string> pool;         // "inference"; unset: the default pool
  std::optional<std::string> cpus;         // "0.5": host CPU limit (cgroup)
  std::optional<std::string> host_mem;     // "64MiB": host memory limit (cgroup)
  std::optional<std::string> gpu_model;    // "a100" or "a100,h100": the GPU models it may use
};

// Builds and validates a ResourceRequest. Errors name the field ("--mem") and
// the offending token. A request with none of gpus/mem/mig is an error.
Result<ResourceRequest> BuildRequest(const RequestFields& fields);

// A job name must be printable ASCII without spaces or quotes, so it can be
// shown in tables and passed in URLs safely.
Status ValidateJobName(std::string_view name);
// Pool names: 1-64 of letters, digits, '-', '_', '.' (config keys and URLs).
Status ValidatePoolName(std::string_view name);

}  // namespace gpuslice::core
