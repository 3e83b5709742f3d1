// Service: events (recorded by EventLog, store/event_log.h) and usage
// sampling. See service.h.

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_set>

#include "daemon/base/log.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;

namespace {

// Upper bounds of the queue-wait histogram, in seconds: from "started at
// once" to "waited a day", roughly geometric.
constexpr double kWaitBoundsS[] = {0.1, 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 7200, 21600, 86400};

// A sample older than this many intervals is not trusted to stand for the
// whole gap (the daemon was stopped or starved): idle time then grows by one
// interval only.
constexpr int64_t kMaxGapIntervals = 3;

// For a job on MIG devices: the mean activity of its GPU instances (percent
// of each instance's time), or nullopt for a job on no MIG device. Sets
// `u->gpu_util_known` to false when NVML measures one of them not at all.
std::optional<double> MigJobActivity(const core::Allocation& a, const InventorySnapshot& inventory,
                                     const std::vector<GpuUsage>& usage, JobUsage* u) {
  double sum = 0;
  size_t n = 0;
  for (size_t k = 0; k < a.gpu_uuids.size() && k < a.gpu_indices.size(); ++k) {
    const uint32_t g = a.gpu_indices[k];
    if (a.gpu_uuids[k].rfind("MIG-", 0) != 0 || g >= inventory.gpus.size()) continue;
    ++n;
    const MigUsage* m = nullptr;
    for (const MigInstance& mi : inventory.gpus[g].mig) {
      if (mi.uuid == a.gpu_uuids[k] && g < usage.size()) {
        m = MigUsageOf(usage[g], mi.gpu_instance_id);
      }
    }
    if (m == nullptr || !m->known()) {
      u->gpu_util_known = false;
    } else {
      sum += m->utilization_pct;
    }
  }
  if (n == 0) return std::nullopt;
  return u->gpu_util_known ? sum / double(n) : 0.0;
}

}  // namespace

std::unordered_map<int64_t, uint64_t> Service::JobsOfProcesses(const std::vector<int64_t>& pids) {
  // First the job whose cgroup holds the pid (the kernel's word: setsid
  // escapees and processes without the shim stay in it); then the job's
  // process group (jobs without a cgroup); else a slice's process slots. The
  // slots are job-written, so a claim counts only for a process of the job's
  // own user (or one already gone): a job cannot hide someone else's process.
  std::unordered_map<int64_t, uint64_t> out;
  if (pids.empty()) return out;
  const std::unordered_set<int64_t> asked(pids.begin(), pids.end());
  std::unordered_map<int64_t, uint64_t> job_of_group;
  std::unordered_map<int64_t, uint64_t> claimed;
  for (const auto& [id, l] : live_) {
    const Job& job = jobs_[id];
    if (job.pid > 0) {
      if (auto members = launcher_.GroupPids(job.pid)) {
        for (int64_t p : *members) {
          if (asked.count(p)) out.emplace(p, id);
        }
      }
    }
    if (job.pid > 0) job_of_group[job.pid] = id;
    if (job.region_path.empty()) continue;
    if (auto slots = regions_.Pids(job.region_path); slots.ok()) {
      for (int32_t p : *slots) claimed.emplace(p, id);
    }
  }
  ProcessTable& procs = Processes();
  for (int64_t pid : pids) {
    if (out.count(pid)) continue;
    if (auto g = job_of_group.find(procs.ProcessGroupOf(pid)); g != job_of_group.end()) {
      out[pid] = g->second;
      continue;
    }
    auto c = claimed.find(pid);
    if (c == claimed.end()) continue;
    std::optional<ProcessOwner> owner = procs.OwnerOf(pid);
    if (!owner || owner->uid == jobs_[c->second].uid) out[pid] = c->second;
  }
  return out;
}

ProcessTable& Service::Processes() {
  if (options_.processes) return *options_.processes;
  static ProcProcessTable real;  // Stateless: /proc and kill(2).
  return real;
}

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

core::Result<std::vector<Event>> Service::Events(const EventQuery& query) const {
  return events_.Query(query);
}

std::optional<JobUsage> Service::UsageOf(uint64_t job_id) const {
  auto it = usage_.find(job_id);
  if (it == usage_.end()) return std::nullopt;
  return it->second;
}

void Service::ObserveWait(const Job& job) {
  WaitHistogram& h = wait_histogram_;
  if (h.bounds_s.empty()) {
    h.bounds_s.assign(std::begin(kWaitBoundsS), std::end(kWaitBoundsS));
    h.cumulative.assign(h.bounds_s.size(), 0);
  }
  double wait_s = std::max<int64_t>(0, job.started_ms - job.submitted_ms) / 1000.0;
  for (size_t i = 0; i < h.bounds_s.size(); ++i) {
    if (wait_s <= h.bounds_s[i]) ++h.cumulative[i];
  }
  ++h.count;
  h.sum_s += wait_s;
}

void Service::Sample() {
  int64_t now = clock_.NowMs();
  int64_t gap = last_sample_ms_ == 0 ? 0 : now - last_sample_ms_;
  if (gap > kMaxGapIntervals * options_.sample_interval_ms) gap = options_.sample_interval_ms;
  last_sample_ms_ = now;

  auto gpus = inventory_source_.Usage();
  const bool fresh = gpus.ok();
  if (gpus.ok()) {
    gpu_usage_ = std::move(*gpus);
    usage_error_logged_ = false;
  } else if (!usage_error_logged_) {
    LogWarn("cannot read GPU usage: " + gpus.status().message());
    usage_error_logged_ = true;
  }

  // What each job's slice reports (job-written: shown, never a limit).
  // Its process slots name the processes the shim registered.
  std::unordered_map<uint64_t, std::unordered_set<int32_t>> registered;
  for (const auto& [id, l] : live_) {
    const Job& job = jobs_[id];
    JobUsage& u = usage_[id];
    u.sampled_ms = now;
    u.pids.clear();
    u.memory_used_bytes = u.memory_peak_bytes = 0;
    u.refused_allocs = u.throttled_ns = 0;
    u.nvml_memory_bytes = 0;
    u.nvml_memory_by_gpu.clear();
    u.processes_by_gpu.clear();
    u.sm_pct_by_gpu.clear();
    u.registered_by_gpu.clear();
    // The limit is the daemon's own (the ledger's allocation), never the
    // one in the job-writable region.
    u.memory_limit_bytes = job.allocation.memory_bytes_per_gpu * job.allocation.gpu_indices.size();
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
  for (const GpuUsage& g : gpu_usage_) {
    for (const GpuProcess& p : g.processes) gpu_pids.push_back(p.pid);
  }
  std::unordered_map<int64_t, uint64_t> job_of_pid = JobsOfProcesses(gpu_pids);
  std::unordered_map<uint64_t, std::map<uint32_t, double>> sm;
  for (const GpuUsage& g : gpu_usage_) {
    for (const GpuProcess& p : g.processes) {
      // Every process's figure teaches the size of a context (NVML's, never
      // a job's report); a stale read teaches nothing.
      if (fresh) context_sizes_.Observe(g.index, p.pid, p.used_memory);
      auto it = job_of_pid.find(p.pid);
      if (it == job_of_pid.end()) continue;  // Foreign (WatchForeign).
      JobUsage& u = usage_[it->second];
      if (std::find(u.pids.begin(), u.pids.end(), static_cast<int32_t>(p.pid)) == u.pids.end()) {
        u.pids.push_back(static_cast<int32_t>(p.pid));
      }
      u.nvml_memory_bytes += p.used_memory;
      u.nvml_memory_by_gpu[g.index] += p.used_memory;
      ++u.processes_by_gpu[g.index];
      if (registered[it->second].count(static_cast<int32_t>(p.pid))) {
        ++u.registered_by_gpu[g.index];
      }
      u.sm_pct_by_gpu[g.index] += p.sm_util_pct;
      sm[it->second][g.index] += p.sm_util_pct;
    }
  }
  if (fresh) context_sizes_.EndSample();
  // Memory jobs' processes hold over their limits: taken in
  // placement at once, before the watchdog acts on it (or while it is
  // within the allowance), so that no job is placed where it is not there.
  OverLimit over_limit;
  for (const auto& [id, l] : live_) {
    const Job& job = jobs_[id];
    for (const auto& [gpu, held] : usage_[id].nvml_memory_by_gpu) {
      const uint64_t limit = MemoryLimitOn(job, gpu);
      if (held <= limit) continue;
      auto& [bytes, who] = over_limit[gpu];
      bytes += held - limit;
      who += (who.empty() ? "job " : ", job ") + std::to_string(id);
    }
  }
  WatchForeign(job_of_pid, over_limit);
  bool persist_idle = now - last_idle_persist_ms_ >= 60'000;
  for (auto& [id, l] : live_) {
    Job& job = jobs_[id];
    JobUsage& u = usage_[id];
    if (job.state == JobState::kSuspended) {
      u.low_use_ms = 0;  // Holds no GPU: not idle on one.
      continue;
    }
    double sum = 0;
    for (uint32_t g : job.allocation.gpu_indices) {
      auto per_job = sm.find(id);
      if (per_job == sm.end()) break;
      auto it = per_job->second.find(g);
      if (it != per_job->second.end()) sum += std::min(100.0, it->second);
    }
    size_t n = job.allocation.gpu_indices.size();
    u.gpu_util_pct = n ? sum / static_cast<double>(n) : 0;
    // A MIG job: NVML has no per-process figure on MIG devices; its
    // instances' activity (GPM) is the job's use of what it holds. Without
    // GPM (an A100) there is no figure, and no figure is not idleness.
    u.gpu_util_known = true;
    if (std::optional<double> mig = MigJobActivity(job.allocation, inventory_, gpu_usage_, &u)) {
      u.gpu_util_pct = *mig;
    }
    // A slice held back by the arbiter (others' turns: priority, shares) is
    // not idle for it: the part of the interval it waited counts as use
    // (else a starved high-priority slice would be paused as idle).
    double busy_pct = u.gpu_util_pct;
    if (!job.region_path.empty()) {
      const uint64_t waited = regions_.WaitedNs(job.region_path);
      if (gap > 0 && waited > u.waited_ns_seen) {
        busy_pct += 100.0 * double(waited - u.waited_ns_seen) / (double(gap) * 1e6);
      }
      u.waited_ns_seen = waited;
    }
    if (!u.gpu_util_known) {
      u.low_use_ms = 0;
    } else if (gap > 0 && busy_pct < options_.idle_threshold_pct) {
      u.low_use_ms += gap;
      job.idle_ms += gap;
    } else if (busy_pct >= options_.idle_threshold_pct) {
      u.low_use_ms = 0;
    }
    u.idle_ms_total = job.idle_ms;
    if (persist_idle && gap > 0) Persist(job, job.state);
  }
  if (persist_idle) last_idle_persist_ms_ = now;
  // Forget jobs that ended.
  for (auto it = usage_.begin(); it != usage_.end();) {
    it = live_.count(it->first) ? std::next(it) : usage_.erase(it);
  }
}

}  // namespace gpuslice::daemon
