#pragma once

// What callers ask of the daemon's verbs (submit, resize, update) and the
// quotas they read: plain values the API layer fills from JSON.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/jobs/dependency.h"
#include "core/jobs/job.h"
#include "core/schedule/quota.h"

namespace gpuslice::daemon {

struct SubmitSpec {
  core::RequestFields fields;
  core::JobMode mode = core::JobMode::kSubmit;
  std::vector<std::string> argv;
  std::string cwd;
  std::vector<std::string> env;
  bool restartable = false;      // Preemption requeues it instead of ending it.
  bool no_idle_reclaim = false;  // Idle reclaim leaves it alone.
  // --after: jobs that must end (or exit 0) first (core/jobs/dependency.h).
  std::vector<core::Dependency> after;
  // --image, --engine: a container job (container_job.h).
  std::optional<std::string> image;
  std::optional<std::string> engine;
  // Labels of any job; for external jobs (mode external): held paused until
  // resumed, and the GPUs it may be placed on (empty: any).
  std::map<std::string, std::string> labels;
  bool paused = false;
  std::vector<std::string> gpu_uuids;
  // External jobs: bound to the calling process (Job::holder_pid), released
  // when it is gone.
  bool bound_to_caller = false;
};

// A quota with what its principal's running jobs hold now.
struct QuotaView {
  core::Principal who;
  core::Quota quota;
  core::QuotaCharge in_use;
};

// `gpuslice resize`: the new size of a running fraction (unset: unchanged).
struct ResizeSpec {
  std::optional<std::string> mem;
  std::optional<std::string> compute;
  std::optional<std::string> gpus;      // An elastic job's GPU count, within its range.
  std::optional<std::string> priority;  // low | normal | high, live.
  bool force = false;                   // Even below the memory it uses now.
};

// `gpuslice update`: a queued job's new request (unset: unchanged).
struct UpdateSpec {
  std::optional<std::string> mem;
  std::optional<std::string> compute;
  std::optional<std::string> priority;
  std::optional<std::string> after;  // Replaces its dependencies; "" drops them.
};

}  // namespace gpuslice::daemon
