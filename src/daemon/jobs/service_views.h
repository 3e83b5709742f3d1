#pragma once

// What the node daemon's Service answers to reads (service.h): a job with
// what only the live daemon knows, its usage, its log, foreign GPU processes
// and the queue-wait histogram. Plain values, copied out of the service.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/jobs/dependency.h"
#include "core/jobs/job.h"
#include "daemon/waits/dependencies.h"  // DependencyView

namespace gpuslice::daemon {

// What a running job uses, sampled once a second from its slice region (what
// the shim charged) and NVML (what its processes hold and how busy they keep
// the GPU).
struct JobUsage {
  int64_t sampled_ms = 0;
  uint64_t memory_used_bytes = 0;   // Sum over its GPUs (the shim's count).
  uint64_t memory_limit_bytes = 0;  // Sum over its GPUs.
  uint64_t memory_peak_bytes = 0;
  // What NVML says its processes hold (includes CUDA contexts and memory a
  // process that escaped the shim allocated): the watchdog's figure.
  uint64_t nvml_memory_bytes = 0;
  // Achieved compute: its processes' SM use summed per GPU, averaged over its
  // GPUs (0-100); for a MIG job its instances' activity.
  double gpu_util_pct = 0;
  // False when NVML gives no figure for it (a MIG job on a GPU without GPM):
  // gpu_util_pct is then 0 and means nothing; the job is never idle for it.
  bool gpu_util_known = true;
  uint64_t refused_allocs = 0;
  uint64_t throttled_ns = 0;
  // How long gpu_util_pct has stayed below the idle threshold (0 when above).
  int64_t low_use_ms = 0;
  // The arbiter's WaitedNs at the last sample: time the slice spent waiting
  // for its turn counts as use, not idleness.
  uint64_t waited_ns_seen = 0;
  // Time below the threshold over the job's life (persisted as jobs.idle_ms).
  int64_t idle_ms_total = 0;
  std::vector<int32_t> pids;  // Processes seen in the slice or its process group.
  // Per GPU (inventory index) its processes are on, from NVML: memory held,
  // how many processes, their SM use summed (0-100 per process). The
  // watchdog compares these with the daemon's own limits.
  std::map<uint32_t, uint64_t> nvml_memory_by_gpu;
  std::map<uint32_t, uint32_t> processes_by_gpu;
  std::map<uint32_t, double> sm_pct_by_gpu;
  // Of processes_by_gpu, those the shim registered (the job's slice names
  // them in a process slot): each may hold a context over the limit.
  std::map<uint32_t, uint32_t> registered_by_gpu;
};

// A GPU process that belongs to no job (NVML lists it; no job's process
// group or slice claims it), as of the last sample.
struct ForeignProcess {
  uint32_t gpu_index = 0;
  uint32_t pid = 0;
  uint64_t used_memory = 0;
  int64_t uid = -1;  // -1: the process is gone (its owner unknown).
  std::string user;  // "?" when unknown.
  // Root, the admin group or an allowed group: `foreign` never ends it.
  bool spared = false;
  // The MIG device it runs in ("MIG-..."), on a GPU in MIG mode; "" else.
  std::string mig_uuid;
};

// Queue waits of started jobs (submitted -> started), for the metrics'
// histogram: cumulative counts per upper bound, like Prometheus buckets.
struct WaitHistogram {
  std::vector<double> bounds_s;
  std::vector<uint64_t> cumulative;  // cumulative[i]: waits <= bounds_s[i].
  uint64_t count = 0;
  double sum_s = 0;
};

// A job plus what only the live daemon knows.
struct JobView {
  core::Job job;
  // 1-based; 0 when not waiting in the queue (a queued job, or a suspended
  // one whose processes asked to be resumed).
  int queue_position = 0;
  std::string waiting_for;        // Why it waits.
  std::optional<JobUsage> usage;  // Running jobs, once sampled.
  // Policy flags of a running job: "idle", "paused", "over_limit", "preempted".
  std::vector<std::string> flags;
  std::vector<DependencyView> after;  // One per job.after entry.
  // Why the last suspend or resume of this job failed ("" if it did not).
  std::string checkpoint_error;
  // Its fair-share factor (0-1, core/fair_share.h) as of the last ranking,
  // for live jobs while fair share is on; -1 otherwise.
  double fair_share = -1;
  // The job first in line: when it is expected to start (its reservation),
  // when known.
  std::optional<int64_t> expected_start_ms = std::nullopt;
};

struct LogChunk {
  std::string data;
  uint64_t next_offset = 0;
  core::JobState state = core::JobState::kQueued;
  int exit_code = -1;
};

}  // namespace gpuslice::daemon
