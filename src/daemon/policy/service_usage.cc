// Service: events (recorded by EventLog, store/event_log.h) and usage
// sampling. See service.h.

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_set>

#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;

void Service::RecordEvent(std::string kind, uint64_t job_id, std::string user,
                          std::string message) {
  Event e;
  e.at_ms = clock_.NowMs();
  e.kind = std::move(kind);
  e.job_id = job_id;
  e.user = std::move(user);
  e.message = std::move(message);
  events_.Record(std::move(e));
}

void Service::Sample() {
  int64_t now = clock_.NowMs();
  const int64_t gap = usage_.BeginSample(now, options_.sample_interval_ms);
  usage_.TakeGpuUsage(inventory_source_.Usage());

  // What each job's slice reports (job-written: shown, never a limit).
  // Its process slots name the processes the shim registered.
  std::unordered_map<uint64_t, std::unordered_set<int32_t>> registered;
  for (const auto& [id, l] : table_.live()) {
    const Job& job = table_.jobs()[id];
    // The limit is the daemon's own (the ledger's allocation), never the
    // one in the job-writable region.
    JobUsage& u = usage_.Reset(
        id, now, job.allocation.memory_bytes_per_gpu * job.allocation.gpu_indices.size());
    if (job.region_path.empty()) continue;
    if (auto pids = regions_.Pids(job.region_path); pids.ok()) {
      u.pids = *pids;
      registered[id].insert(pids->begin(), pids->end());
    }
    if (auto slices = regions_.Usage(job.region_path); slices.ok()) {
      for (const SliceUsage& s : *slices) {
        u.memory_used_bytes += s.used_bytes;
        u.memory_peak_bytes += s.peak_bytes;
        u.refused_allocs += s.refused_allocs;
        u.throttled_ns += s.throttled_ns;
      }
    }
  }
  // NVML's ground truth, per job and GPU.
  std::vector<int64_t> gpu_pids;
  for (const GpuUsage& g : usage_.gpus()) {
    for (const GpuProcess& p : g.processes) gpu_pids.push_back(p.pid);
  }
  std::unordered_map<int64_t, uint64_t> job_of_pid = procs_.JobsOf(gpu_pids);
  for (const GpuUsage& g : usage_.gpus()) {
    for (const GpuProcess& p : g.processes) {
      auto it = job_of_pid.find(p.pid);
      if (it == job_of_pid.end()) continue;  // Foreign (ForeignUse).
      usage_.AddProcess(it->second, g.index, p,
                        registered[it->second].count(static_cast<int32_t>(p.pid)) > 0);
    }
  }
  // Memory jobs' processes hold over their limits: taken in
  // placement at once, before the watchdog acts on it (or while it is
  // within the allowance), so that no job is placed where it is not there.
  ForeignUse::OverLimit over_limit;
  for (const auto& [id, l] : table_.live()) {
    const Job& job = table_.jobs()[id];
    for (const auto& [gpu, held] : usage_.Find(id)->nvml_memory_by_gpu) {
      const uint64_t limit = Watchdog::MemoryLimitOn(job, gpu);
      if (held <= limit) continue;
      auto& [bytes, who] = over_limit[gpu];
      bytes += held - limit;
      who += (who.empty() ? "job " : ", job ") + std::to_string(id);
    }
  }
  // The processes a root-owned external job's slice names (a pod's
  // containers, docs/KUBERNETES.md): they run as uids nobody knows in
  // advance, so their claim does not make them the job's, but only holders
  // of the slice's own group can write those slots. Charged, never ended.
  std::unordered_map<int64_t, uint64_t> container_of;
  for (const auto& [id, l] : table_.live()) {
    const Job& job = table_.jobs()[id];
    if (external_.SharedGidOf(job) == 0 || job.region_path.empty()) continue;
    if (auto pids = regions_.Pids(job.region_path); pids.ok()) {
      for (int32_t pid : *pids) container_of.emplace(pid, id);
    }
  }
  const std::string admin_group =
      options_.admin_gid ? ranker_.GroupNameOf(*options_.admin_gid) : "";
  foreign_.Watch({usage_.gpus(), inventory_, job_of_pid, container_of, over_limit, options_.rules,
                  admin_group, capacity_.get()});
  bool persist_idle = usage_.IdlePersistDue(now);
  for (auto& [id, l] : table_.live()) {
    Job& job = table_.jobs()[id];
    if (job.state == JobState::kSuspended) {
      usage_.HoldsNoGpu(id);
      continue;
    }
    usage_.SetUtilization(id, job.allocation, inventory_);
    std::optional<uint64_t> waited;
    if (!job.region_path.empty()) waited = regions_.WaitedNs(job.region_path);
    const double busy_pct = usage_.BusyPct(id, gap, waited);
    job.idle_ms = usage_.AccountIdle(id, gap, busy_pct, options_.idle_threshold_pct, job.idle_ms);
    if (persist_idle && gap > 0) Persist(job, job.state);
  }
  if (persist_idle) usage_.IdlePersisted(now);
  // Forget jobs that ended.
  usage_.ForgetEnded([this](uint64_t id) { return table_.live().count(id) > 0; });
}

}  // namespace gpuslice::daemon
