#include "core/jobs/job.h"

#include <array>
#include <utility>

namespace gpuslice::core {
namespace {

constexpr std::array<std::pair<JobState, std::string_view>, 7> kStateNames = {{
    {JobState::kQueued, "queued"},
    {JobState::kRunning, "running"},
    {JobState::kExited, "exited"},
    {JobState::kCancelled, "cancelled"},
    {JobState::kTimedOut, "timed_out"},
    {JobState::kFailed, "failed"},
    {JobState::kSuspended, "suspended"},
}};

constexpr std::array<std::pair<JobMode, std::string_view>, 4> kModeNames = {{
    {JobMode::kRun, "run"},
    {JobMode::kSubmit, "submit"},
    {JobMode::kShell, "shell"},
    {JobMode::kExternal, "external"},
}};

// The edges of the state diagram in job.h.
constexpr std::array<std::pair<JobState, JobState>, 14> kEdges = {{
    {JobState::kQueued, JobState::kRunning},
    {JobState::kQueued, JobState::kCancelled},
    {JobState::kQueued, JobState::kFailed},
    {JobState::kRunning, JobState::kExited},
    {JobState::kRunning, JobState::kCancelled},
    {JobState::kRunning, JobState::kTimedOut},
    {JobState::kRunning, JobState::kFailed},
    {JobState::kRunning, JobState::kQueued},  // Preempted, restartable.
    {JobState::kRunning, JobState::kSuspended},
    {JobState::kSuspended, JobState::kRunning},
    {JobState::kSuspended, JobState::kExited},
    {JobState::kSuspended, JobState::kCancelled},
    {JobState::kSuspended, JobState::kTimedOut},
    {JobState::kSuspended, JobState::kFailed},
}};

}  // namespace

std::string_view JobStateName(JobState state) {
  for (const auto& [s, name] : kStateNames) {
    if (s == state) return name;
  }
  return "unknown";
}

Result<JobState> ParseJobState(std::string_view name) {
  for (const auto& [s, n] : kStateNames) {
    if (n == name) return s;
  }
  return InvalidArgumentError("unknown job state '" + std::string(name) +
                              "' (expected queued, running, suspended, exited, cancelled, "
                              "timed_out or failed)");
}

std::string_view HoldKindName(HoldKind hold) {
  switch (hold) {
    case HoldKind::kNone:
      return "";
    case HoldKind::kUser:
      return "user";
    case HoldKind::kAdmin:
      return "admin";
  }
  return "";
}

Result<HoldKind> ParseHoldKind(std::string_view name) {
  for (HoldKind h : {HoldKind::kNone, HoldKind::kUser, HoldKind::kAdmin}) {
    if (HoldKindName(h) == name) return h;
  }
  return InvalidArgumentError("unknown hold '" + std::string(name) + "' (expected user or admin)");
}

bool IsTerminal(JobState state) {
  return state != JobState::kQueued && state != JobState::kRunning && state != JobState::kSuspended;
}

bool CanTransition(JobState from, JobState to) {
  for (const auto& [a, b] : kEdges) {
    if (a == from && b == to) return true;
  }
  return false;
}

std::string_view JobModeName(JobMode mode) {
  for (const auto& [m, name] : kModeNames) {
    if (m == mode) return name;
  }
  return "submit";
}

Result<JobMode> ParseJobMode(std::string_view name) {
  for (const auto& [m, n] : kModeNames) {
    if (n == name) return m;
  }
  return InvalidArgumentError("unknown job mode '" + std::string(name) +
                              "' (expected run, submit, shell or external)");
}

Status ValidateLabels(const std::map<std::string, std::string>& labels) {
  if (labels.size() > kMaxLabels) {
    return InvalidArgumentError("labels: at most " + std::to_string(kMaxLabels) + ", got " +
                                std::to_string(labels.size()));
  }
  for (const auto& [key, value] : labels) {
    if (key.empty() || key.size() > kMaxLabelKey) {
      return InvalidArgumentError("labels: a key must be 1 to " + std::to_string(kMaxLabelKey) +
                                  " characters, got '" + key.substr(0, 80) + "'");
    }
    for (char c : key) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '.' || c == '-' || c == '/';
      if (!ok) {
        return InvalidArgumentError("labels: key '" + key +
                                    "' may hold only letters, digits, '_', '.', '-' and '/'");
      }
    }
    if (value.size() > kMaxLabelValue) {
      return InvalidArgumentError("labels: the value of '" + key + "' is longer than " +
                                  std::to_string(kMaxLabelValue) + " characters");
    }
    for (char c : value) {
      // Printable ASCII only: labels end up in Prometheus series, tables and
      // JSON, where a control character or a quote would break or forge them.
      if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') {
        return InvalidArgumentError("labels: the value of '" + key +
                                    "' must be printable ASCII without quotes or backslashes");
      }
    }
  }
  return Status::Ok();
}

std::optional<int64_t> Job::DeadlineMs() const {
  // Time suspended does not count: the clock stops while the job holds no
  // GPU and cannot run.
  if (!request.max_runtime || started_ms == 0 || suspended_since_ms != 0) return std::nullopt;
  return started_ms + request.max_runtime->count() + suspended_total_ms;
}

Status ValidateJobName(std::string_view name) {
  if (name.size() > 128) return InvalidArgumentError("name: longer than 128 characters");
  for (char c : name) {
    bool ok = c > ' ' && c < 127 && c != '"' && c != '\'' && c != '\\' && c != '/';
    if (!ok) {
      return InvalidArgumentError("name '" + std::string(name) +
                                  "': only printable characters without spaces, quotes, "
                                  "slashes or backslashes");
    }
  }
  return Status::Ok();
}

Status ValidatePoolName(std::string_view name) {
  bool ok = !name.empty() && name.size() <= 64;
  for (char c : name) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_' || c == '.');
  }
  if (!ok) {
    return InvalidArgumentError("--pool '" + std::string(name.substr(0, 64)) +
                                "': a pool name of letters, digits, '-', '_' or '.'");
  }
  return Status::Ok();
}

Result<ResourceRequest> BuildRequest(const RequestFields& f) {
  ResourceRequest r;
  if (f.compute_mode && !f.compute) {
    return InvalidArgumentError("--compute-mode goes with --compute (a share of one GPU)");
  }
  if (f.compute && !f.mem) {
    return InvalidArgumentError("--compute goes with --mem (a part of one GPU)");
  }
  int kinds = (f.gpus ? 1 : 0) + (f.mem ? 1 : 0) + (f.mig ? 1 : 0);
  if (kinds == 0) {
    return InvalidArgumentError(
        "no resources asked: give --gpus N (whole GPUs), --mem SIZE [--compute PCT] (part of "
        "a GPU) or --mig PROFILE");
  }
  if (kinds > 1) {
    return InvalidArgumentError("--gpus, --mem and --mig exclude each other: pick one");
  }
  if (f.gpus) {
    r.kind = RequestKind::kWholeGpus;
    GPUSLICE_RETURN_IF_ERROR(
        ParseGpuCount(*f.gpus, &r.gpus_min, &r.gpus_max).WithContext("--gpus"));
  } else if (f.mem) {
    r.kind = RequestKind::kFraction;
    GPUSLICE_RETURN_IF_ERROR(ApplySliceSize(f.mem, f.compute, &r));
    if (f.compute_mode) {
      if (!f.compute) return InvalidArgumentError("--compute-mode goes with --compute");
      auto mode = ParseComputeMode(*f.compute_mode);
      if (!mode.ok()) return mode.status().WithContext("--compute-mode");
      r.compute_mode = *mode;
    }
  } else {
    r.kind = RequestKind::kMig;
    auto mig = ParseMigProfile(*f.mig);
    if (!mig.ok()) return mig.status().WithContext("--mig");
    r.mig = *mig;
  }
  if (f.cpus) {
    auto cpus = ParseCpuMilli(*f.cpus);
    if (!cpus.ok()) return cpus.status().WithContext("--cpus");
    r.host_cpu_milli = *cpus;
  }
  if (f.gpu_model) {
    auto models = ParseGpuModels(*f.gpu_model);
    if (!models.ok()) return models.status().WithContext("--gpu-model");
    r.gpu_models = std::move(*models);
  }
  if (f.host_mem) {
    auto mem = ParseBytes(*f.host_mem);
    if (!mem.ok()) return mem.status().WithContext("--host-mem");
    if (*mem < kMinHostMemoryBytes) {
      return InvalidArgumentError(
          "--host-mem: must be at least 4 MiB (a process needs some "
          "memory to start)");
    }
    r.host_memory_bytes = *mem;
  }
  if (f.priority) {
    auto p = ParsePriority(*f.priority);
    if (!p.ok()) return p.status().WithContext("--priority");
    r.priority = *p;
  }
  if (f.name) {
    GPUSLICE_RETURN_IF_ERROR(ValidateJobName(*f.name));
    r.name = *f.name;
  }
  if (f.pool) {
    GPUSLICE_RETURN_IF_ERROR(ValidatePoolName(*f.pool));
    r.pool = *f.pool;
  }
  if (f.max_runtime) {
    auto d = ParseDuration(*f.max_runtime);
    if (!d.ok()) return d.status().WithContext("--max-runtime");
    r.max_runtime = *d;
  }
  GPUSLICE_RETURN_IF_ERROR(r.Validate());
  return r;
}

}  // namespace gpuslice::core
