// UsageBook: see usage_book.h.

#include "daemon/usage/usage_book.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "daemon/base/log.h"

namespace gpuslice::daemon {

namespace {

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

int64_t UsageBook::BeginSample(int64_t now_ms, int64_t interval_ms) {
  int64_t gap = last_sample_ms_ == 0 ? 0 : now_ms - last_sample_ms_;
  if (gap > kMaxGapIntervals * interval_ms) gap = interval_ms;
  last_sample_ms_ = now_ms;
  return gap;
}

bool UsageBook::TakeGpuUsage(core::Result<std::vector<GpuUsage>> read) {
  if (!read.ok()) {
    if (!error_logged_) {
      LogWarn("cannot read GPU usage: " + read.status().message());
      error_logged_ = true;
    }
    return false;
  }
  gpus_ = std::move(*read);
  error_logged_ = false;
  // Every process's figure teaches the size of a context (NVML's, never a
  // job's report); a stale read teaches nothing.
  for (const GpuUsage& g : gpus_) {
    for (const GpuProcess& p : g.processes) context_sizes_.Observe(g.index, p.pid, p.used_memory);
  }
  context_sizes_.EndSample();
  return true;
}

JobUsage& UsageBook::Reset(uint64_t id, int64_t now_ms, uint64_t memory_limit_bytes) {
  JobUsage& u = jobs_[id];
  u.sampled_ms = now_ms;
  u.pids.clear();
  u.memory_used_bytes = u.memory_peak_bytes = 0;
  u.refused_allocs = u.throttled_ns = 0;
  u.nvml_memory_bytes = 0;
  u.nvml_memory_by_gpu.clear();
  u.processes_by_gpu.clear();
  u.sm_pct_by_gpu.clear();
  u.registered_by_gpu.clear();
  u.memory_limit_bytes = memory_limit_bytes;
  return u;
}

void UsageBook::AddProcess(uint64_t id, uint32_t gpu, const GpuProcess& p, bool registered) {
  JobUsage& u = jobs_[id];
  if (std::find(u.pids.begin(), u.pids.end(), static_cast<int32_t>(p.pid)) == u.pids.end()) {
    u.pids.push_back(static_cast<int32_t>(p.pid));
  }
  u.nvml_memory_bytes += p.used_memory;
  u.nvml_memory_by_gpu[gpu] += p.used_memory;
  ++u.processes_by_gpu[gpu];
  if (registered) ++u.registered_by_gpu[gpu];
  u.sm_pct_by_gpu[gpu] += p.sm_util_pct;
}

void UsageBook::SetUtilization(uint64_t id, const core::Allocation& allocation,
                               const InventorySnapshot& inventory) {
  JobUsage& u = jobs_[id];
  double sum = 0;
  for (uint32_t g : allocation.gpu_indices) {
    auto it = u.sm_pct_by_gpu.find(g);
    if (it != u.sm_pct_by_gpu.end()) sum += std::min(100.0, it->second);
  }
  size_t n = allocation.gpu_indices.size();
  u.gpu_util_pct = n ? sum / static_cast<double>(n) : 0;
  // A MIG job: NVML has no per-process figure on MIG devices; its
  // instances' activity (GPM) is the job's use of what it holds. Without
  // GPM (an A100) there is no figure, and no figure is not idleness.
  u.gpu_util_known = true;
  if (std::optional<double> mig = MigJobActivity(allocation, inventory, gpus_, &u)) {
    u.gpu_util_pct = *mig;
  }
}

double UsageBook::BusyPct(uint64_t id, int64_t gap_ms, std::optional<uint64_t> waited_ns) {
  JobUsage& u = jobs_[id];
  // A slice held back by the arbiter (others' turns: priority, shares) is
  // not idle for it: the part of the interval it waited counts as use
  // (else a starved high-priority slice would be paused as idle).
  double busy_pct = u.gpu_util_pct;
  if (waited_ns) {
    if (gap_ms > 0 && *waited_ns > u.waited_ns_seen) {
      busy_pct += 100.0 * double(*waited_ns - u.waited_ns_seen) / (double(gap_ms) * 1e6);
    }
    u.waited_ns_seen = *waited_ns;
  }
  return busy_pct;
}

int64_t UsageBook::AccountIdle(uint64_t id, int64_t gap_ms, double busy_pct, double threshold_pct,
                               int64_t idle_ms) {
  JobUsage& u = jobs_[id];
  if (!u.gpu_util_known) {
    u.low_use_ms = 0;
  } else if (gap_ms > 0 && busy_pct < threshold_pct) {
    u.low_use_ms += gap_ms;
    idle_ms += gap_ms;
  } else if (busy_pct >= threshold_pct) {
    u.low_use_ms = 0;
  }
  u.idle_ms_total = idle_ms;
  return idle_ms;
}

void UsageBook::HoldsNoGpu(uint64_t id) { jobs_[id].low_use_ms = 0; }

std::optional<JobUsage> UsageBook::Of(uint64_t id) const {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return std::nullopt;
  return it->second;
}

const JobUsage* UsageBook::Find(uint64_t id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

void UsageBook::ForgetEnded(const std::function<bool(uint64_t id)>& live) {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    it = live(it->first) ? std::next(it) : jobs_.erase(it);
  }
}

void UsageBook::ObserveQueueWait(int64_t wait_ms) {
  // Upper bounds in seconds: from "started at once" to "waited a day",
  // roughly geometric.
  static constexpr double kBoundsS[] = {0.1, 1,    5,    15,   30,    60,   300,
                                        900, 1800, 3600, 7200, 21600, 86400};
  WaitHistogram& h = queue_waits_;
  if (h.bounds_s.empty()) {
    h.bounds_s.assign(std::begin(kBoundsS), std::end(kBoundsS));
    h.cumulative.assign(h.bounds_s.size(), 0);
  }
  const double wait_s = std::max<int64_t>(0, wait_ms) / 1000.0;
  for (size_t i = 0; i < h.bounds_s.size(); ++i) {
    if (wait_s <= h.bounds_s[i]) ++h.cumulative[i];
  }
  ++h.count;
  h.sum_s += wait_s;
}

}  // namespace gpuslice::daemon
