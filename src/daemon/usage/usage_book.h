#pragma once

// The daemon's usage book (docs/DAEMON.md, "Usage sampling"): what each
// running job used at the last sample, what NVML said of the GPUs, and the
// size of a fresh context per GPU that NVML's figures teach. Service samples
// once per sample_interval_ms: it reads the slices and the processes, decides
// which job each GPU process is (it holds the job table), and records the
// results here; the watchdog, idle reclaim, the API and the metrics read them
// back. One thread, as Service.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/jobs/job.h"
#include "core/status.h"
#include "daemon/node/inventory.h"
#include "daemon/placement/memory_allowance.h"

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

// Queue waits of started jobs (submitted -> started), for the metrics'
// histogram: cumulative counts per upper bound, like Prometheus buckets.
struct WaitHistogram {
  std::vector<double> bounds_s;
  std::vector<uint64_t> cumulative;  // cumulative[i]: waits <= bounds_s[i].
  uint64_t count = 0;
  double sum_s = 0;
};

class UsageBook {
 public:
  // A gap longer than this many intervals is not trusted to stand for the
  // whole of it (the daemon was stopped or starved): BeginSample counts one
  // interval instead.
  static constexpr int64_t kMaxGapIntervals = 3;

  // Whether a sample is due at `now_ms` (always before the first).
  bool Due(int64_t now_ms, int64_t interval_ms) const {
    return now_ms - last_sample_ms_ >= interval_ms;
  }
  // Starts the sample at `now_ms`: returns the time it stands for, the gap
  // since the last one (0 for the first; `interval_ms` for one older than
  // kMaxGapIntervals intervals).
  int64_t BeginSample(int64_t now_ms, int64_t interval_ms);
  // NVML's read of the GPUs: on success it replaces the GPUs' usage and
  // teaches the context sizes, and returns true (fresh). On failure the last
  // figures stay, the error is logged once until a read succeeds again, and
  // it returns false.
  bool TakeGpuUsage(core::Result<std::vector<GpuUsage>> read);
  // The GPUs' usage as of the last good read, in the inventory's order;
  // empty before one.
  const std::vector<GpuUsage>& gpus() const { return gpus_; }
  // The size of a fresh context on GPU `gpu` learnt from NVML; nullopt
  // before a settled figure (memory_allowance.h).
  std::optional<uint64_t> ContextSizeOf(uint32_t gpu) const { return context_sizes_.Of(gpu); }

  // Running job `id` at this sample: its entry (made if new) with this
  // sample's figures cleared, sampled at `now_ms`, its limit the daemon's
  // `memory_limit_bytes`. What carries over between samples (low_use_ms,
  // waited_ns_seen, idle_ms_total) stays. The caller adds what the job's
  // slice reports to the returned entry.
  JobUsage& Reset(uint64_t id, int64_t now_ms, uint64_t memory_limit_bytes);
  // GPU process `p` on GPU `gpu` is job `id`'s (`registered`: its slice
  // names it): its memory, count and SM use are added to the job's figures
  // on that GPU, its pid to the job's.
  void AddProcess(uint64_t id, uint32_t gpu, const GpuProcess& p, bool registered);
  // Job `id`'s GPU use over `allocation`: its processes' SM use per GPU
  // (each at most 100) averaged over its GPUs; for a job on MIG devices, the
  // mean activity of its instances from `inventory` and the GPUs' usage,
  // and unknown when NVML measures one of them not at all.
  void SetUtilization(uint64_t id, const core::Allocation& allocation,
                      const InventorySnapshot& inventory);
  // How busy job `id` kept its GPUs over the last `gap_ms` (percent): its GPU
  // use, plus the time its slice waited for its turn (`waited_ns`: the
  // arbiter's running count, unset without a slice) since the last sample.
  double BusyPct(uint64_t id, int64_t gap_ms, std::optional<uint64_t> waited_ns);
  // Accounts `gap_ms` of job `id` at `busy_pct` against `threshold_pct`:
  // below it the job's low use and its idle time (`idle_ms`, the job's life
  // total) grow by the gap; at or above it low use starts over; unknown use
  // is never idle. Returns the new idle total.
  int64_t AccountIdle(uint64_t id, int64_t gap_ms, double busy_pct, double threshold_pct,
                      int64_t idle_ms);
  // Job `id` holds no GPU now (suspended): it is not idle on one.
  void HoldsNoGpu(uint64_t id);
  // Whether the jobs' idle time is due to be written at `now_ms` (once a
  // minute), and that it was.
  bool IdlePersistDue(int64_t now_ms) const { return now_ms - last_idle_persist_ms_ >= 60'000; }
  void IdlePersisted(int64_t now_ms) { last_idle_persist_ms_ = now_ms; }

  // Job `id`'s usage as of the last sample; nullopt (null) for a job not
  // sampled since it started, resumed or moved.
  std::optional<JobUsage> Of(uint64_t id) const;
  const JobUsage* Find(uint64_t id) const;
  // Forgets job `id` (ended, suspended), or every job for which `live` is
  // false.
  void Forget(uint64_t id) { jobs_.erase(id); }
  void ForgetEnded(const std::function<bool(uint64_t id)>& live);

  // A job started after waiting `wait_ms` in the queue (negative: none).
  void ObserveQueueWait(int64_t wait_ms);
  // The queue waits of every job started since the daemon started.
  const WaitHistogram& queue_waits() const { return queue_waits_; }

 private:
  std::vector<GpuUsage> gpus_;
  std::unordered_map<uint64_t, JobUsage> jobs_;
  // The size of a fresh context per GPU, from NVML (the memory watchdog's
  // allowance, memory_allowance.h).
  ContextSizes context_sizes_;
  int64_t last_sample_ms_ = 0;
  int64_t last_idle_persist_ms_ = 0;
  WaitHistogram queue_waits_;
  bool error_logged_ = false;
};

}  // namespace gpuslice::daemon
