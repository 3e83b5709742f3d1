// The enforcement watchdog (watchdog.h; docs/DAEMON.md, "Enforcement
// watchdog").

#include "daemon/watch/watchdog.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/units.h"
#include "daemon/base/log.h"
#include "daemon/placement/memory_allowance.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;

namespace {

std::string Percent(double pct) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", pct);
  return buf;
}

}  // namespace

bool Watchdog::Watch(const Job& job, const JobUsage& use) {
  JobWatch& w = watched_[job.id];
  return WatchMemory(job, w, use) || WatchCompute(job, w, use);
}

void Watchdog::LetEnd(const Job& job) {
  auto it = watched_.find(job.id);
  if (it == watched_.end() || !it->second.stopped) return;
  hooks_.resume(job);
  it->second.stopped = false;
}

bool Watchdog::Stopped(uint64_t id) const {
  auto it = watched_.find(id);
  return it != watched_.end() && it->second.stopped;
}

void Watchdog::AppendFlags(uint64_t id, std::vector<std::string>* flags) const {
  auto it = watched_.find(id);
  if (it == watched_.end()) return;
  const JobWatch& w = it->second;
  if (w.over_limit) flags->push_back("over_limit");
  if (w.stopped) flags->push_back("stopped");
  if (w.over_share) flags->push_back("over_share");
  if (w.under_reported) flags->push_back("under_reported");
}

uint64_t Watchdog::MemoryLimitOn(const Job& job, uint32_t gpu) {
  if (job.state == JobState::kSuspended) return 0;  // Holds no GPU meanwhile.
  const auto& mine = job.allocation.gpu_indices;
  bool given = std::find(mine.begin(), mine.end(), gpu) != mine.end();
  return given ? job.allocation.memory_bytes_per_gpu : 0;
}

bool Watchdog::WatchMemory(const Job& job, JobWatch& w, const JobUsage& use) {
  const PolicyConfig& rules = rules_;
  if (rules.watchdog == WatchdogAction::kOff) return false;
  // Per GPU: what NVML says the job's processes hold there against the
  // daemon's own limit for that GPU (0 on a GPU the job was not given),
  // plus a context for each process there that the shim registered, up to
  // the ceiling (memory_allowance.h). A process without the shim was never
  // charged a context: it gets nothing.
  std::string what;
  for (const auto& [gpu, held] : use.nvml_memory_by_gpu) {
    const auto& mine = job.allocation.gpu_indices;
    bool given = std::find(mine.begin(), mine.end(), gpu) != mine.end();
    // An elastic job's workers keep a given-back GPU until they restart
    // (docs/DAEMON.md, "Elastic jobs"): not a breach of its own.
    if (!given && hooks_.elastic(job)) continue;
    const uint64_t limit = MemoryLimitOn(job, gpu);
    auto r = use.registered_by_gpu.find(gpu);
    const uint32_t registered = r == use.registered_by_gpu.end() ? 0 : r->second;
    const std::optional<uint64_t> context =
        rules.watchdog_allowance_bytes ? rules.watchdog_allowance_bytes : hooks_.context_size(gpu);
    const uint64_t allowance =
        MemoryAllowance(registered, context, rules.watchdog_allowance_max_bytes);
    if (held <= limit + allowance) continue;
    auto n = use.processes_by_gpu.find(gpu);
    const uint32_t procs = n == use.processes_by_gpu.end() ? 0 : n->second;
    what = "its processes hold " + core::FormatBytes(held) + " on GPU " + std::to_string(gpu) +
           " (NVML), over its limit of " + core::FormatBytes(limit) +
           (given ? "" : " (not its GPU)") + " + an allowance of " + core::FormatBytes(allowance) +
           " (" + std::to_string(procs) + (procs == 1 ? " process, " : " processes, ") +
           std::to_string(registered) + " registered by the shim, a context of " +
           (context ? core::FormatBytes(*context) : std::string("unknown size")) +
           " each, at most " + core::FormatBytes(rules.watchdog_allowance_max_bytes) +
           "): a process escaped the shim";
    break;
  }
  std::string id = std::to_string(job.id);
  if (what.empty()) {
    if (w.stopped) {
      hooks_.resume(job);
      w.stopped = false;
      hooks_.record("watchdog", job, "back under its memory limit; continued");
      hooks_.tell(job, "job " + id + " continued: back under its GPU memory limit");
    }
    w.over_limit = false;
    return false;
  }
  bool first = !w.over_limit;
  w.over_limit = true;
  switch (rules.watchdog) {
    case WatchdogAction::kKill:
      hooks_.kill(job, "watchdog", what);
      return true;
    case WatchdogAction::kStop:
      if (!w.stopped) {
        hooks_.stop(job);
        w.stopped = true;
        hooks_.record("watchdog", job, what + "; stopped until it is back under");
        hooks_.tell(job, "job " + id + " stopped by the watchdog: " + what +
                             "; it continues once back under (end the process that "
                             "holds the memory, or `gpuslice cancel " +
                             id + "`)");
        LogWarn("job " + id + " stopped by the watchdog: " + what);
      }
      return false;
    case WatchdogAction::kReport:
      if (first) {
        hooks_.record("watchdog", job, what + "; reported");
        hooks_.tell(job, "warning: job " + id + ": " + what);
        LogWarn("job " + id + ": " + what);
      }
      return false;
    case WatchdogAction::kOff:
      break;
  }
  return false;
}

bool Watchdog::WatchCompute(const Job& job, JobWatch& w, const JobUsage& use) {
  const PolicyConfig& rules = rules_;
  // Whole GPUs and memory-only slices have no share. A hard share is a
  // bound at all times; a work-conserving one only while other slices wait
  // for the GPU (it may use what they leave): it is held to its share for
  // the part of the window in which the arbiter saw others waiting.
  uint32_t share = job.allocation.compute_milli;
  const bool work_conserving = job.request.compute_mode == core::ComputeMode::kWorkConserving;
  const bool changed = share != w.sm_window_share || work_conserving != w.sm_window_work_conserving;
  if (rules.watchdog_compute == WatchdogAction::kOff || share == 0 || share >= 1000 || changed) {
    w.sm_window.clear();
    w.contended_window.clear();
    w.charged_window.clear();
    w.audit_suspect = false;
    w.sm_window_share = share;
    w.sm_window_work_conserving = work_conserving;
    if (rules.watchdog_compute == WatchdogAction::kOff || share == 0 || share >= 1000) return false;
  }
  int64_t now = use.sampled_ms;
  w.sm_window.emplace_back(now, use.sm_pct_by_gpu);
  w.contended_window.push_back(work_conserving ? regions_.ContendedNs(job.region_path) : 0);
  w.charged_window.push_back(regions_.ChargedNs(job.region_path));
  while (!w.sm_window.empty() &&
         w.sm_window.front().first <= now - rules.watchdog_compute_window_ms) {
    w.sm_window.pop_front();
    w.contended_window.pop_front();
    w.charged_window.pop_front();
  }
  // A full window only: the arbiter withholds an over-using slice's turns
  // within a few of them; use that stays high for a whole window came
  // without turns (a process that bypasses the shim's gate).
  int64_t covered = now - w.sm_window.front().first +
                    sample_interval_ms_;  // Each sample stands for one interval.
  if (covered < rules.watchdog_compute_window_ms) return false;
  AuditCharge(job, w);
  std::map<uint32_t, double> sum;
  for (const auto& [at, per_gpu] : w.sm_window) {
    for (const auto& [gpu, pct] : per_gpu) sum[gpu] += std::min(100.0, pct);
  }
  double share_pct = share / 10.0;
  double allowed_pct = share_pct;
  std::string contention;
  if (work_conserving) {
    // Its share while others waited, the whole GPU the rest of the time.
    const int64_t span_ms = now - w.sm_window.front().first;
    const uint64_t waited_ns = w.contended_window.back() - w.contended_window.front();
    const double contended =
        span_ms > 0 ? std::clamp(double(waited_ns) / (double(span_ms) * 1e6), 0.0, 1.0) : 0.0;
    allowed_pct = share_pct + (1.0 - contended) * (100.0 - share_pct);
    contention =
        " while other slices waited for the GPU " + Percent(100.0 * contended) + " of the time";
  }
  std::string what;
  for (const auto& [gpu, total] : sum) {
    double avg = total / static_cast<double>(w.sm_window.size());
    if (avg <= allowed_pct + rules.watchdog_compute_margin_pct) continue;
    what = "its processes used " + Percent(avg) + " of GPU " + std::to_string(gpu) +
           " (NVML) over " +
           core::FormatDuration(std::chrono::milliseconds(rules.watchdog_compute_window_ms)) +
           contention + ", far over its share of " + core::FormatShareMilli(share) + " (margin " +
           Percent(rules.watchdog_compute_margin_pct) + "): a process bypasses its turns";
    break;
  }
  if (what.empty()) {
    w.over_share = false;
    return false;
  }
  bool first = !w.over_share;
  w.over_share = true;
  if (rules.watchdog_compute == WatchdogAction::kKill) {
    hooks_.kill(job, "watchdog_compute", what);
    return true;
  }
  if (first) {
    hooks_.record("watchdog_compute", job, what + "; reported");
    hooks_.tell(job, "warning: job " + std::to_string(job.id) + ": " + what);
    LogWarn("job " + std::to_string(job.id) + ": " + what);
  }
  return false;
}

// The arbiter charges a slice the GPU time its processes report,
// and a job writes those reports (docs/SECURITY.md). Over the watchdog's
// window, what NVML says its processes used must not exceed what the arbiter
// charged by more than kAuditRatio and kAuditSlackPct points of the window;
// a slice that does hid its work (a hard 20% slice that reported none took
// 43% of a GPU its 50% neighbour left partly idle: the arbiter's check only
// charges a holder that keeps others waiting). From then on the arbiter
// disregards its reports and charges it the wall time of its turns. Honest
// slices are charged at least what they use (docs/COMPUTE.md: the charge
// errs high), NVML's per-process samples lag the charge by at most one
// sample, which the slack covers, and a charge that trails NVML (below) is
// forgiven for one sample: the slice is distrusted only when two audits in a
// row find it short.
void Watchdog::AuditCharge(const Job& job, JobWatch& w) {
  constexpr double kAuditRatio = 1.25;
  constexpr double kAuditSlackPct = 5.0;
  if (w.under_reported || w.sm_window.size() < 2) return;
  // Each NVML sample stands for the interval before it, and is counted only
  // on a GPU where NVML listed the job's processes at the interval's start:
  // a process that appeared within it has a figure for part of it only
  // (counted as the whole, an honest job's first second read 555 ms used
  // against 365 ms charged). Its charge over the intervals counted.
  double used_ms = 0, charged_ms = 0, span_ms = 0;
  for (size_t i = 1; i < w.sm_window.size(); ++i) {
    const auto& [at, now_pct] = w.sm_window[i];
    const auto& [before_at, before_pct] = w.sm_window[i - 1];
    const std::optional<uint64_t> c0 = w.charged_window[i - 1], c1 = w.charged_window[i];
    // Not arbitrated (nothing to audit), or a charge that went back: the
    // slice moved to other GPUs (a resume), whose boards count from zero.
    if (!c0 || !c1 || *c1 < *c0) continue;
    double pct = 0;
    bool counted = false;
    for (const auto& [gpu, p] : now_pct) {
      if (!before_pct.count(gpu)) continue;
      pct += std::clamp(p, 0.0, 100.0);
      counted = true;
    }
    if (!counted) continue;
    const double dt = double(at - before_at);
    used_ms += pct / 100.0 * dt;
    charged_ms += double(*c1 - *c0) / 1e6;
    span_ms += dt;
  }
  if (span_ms <= 0 || used_ms <= charged_ms * kAuditRatio + kAuditSlackPct / 100.0 * span_ms) {
    w.audit_suspect = false;
    return;
  }
  // Short at two samples in a row. A process publishes the GPU time of its
  // work once it sees the work complete, so the charge trails NVML by the
  // time its publishing thread takes to run: on a CPU-starved 2-core machine
  // an honest 50% slice that resumed after a stall read 115 ms used against
  // 21 ms charged over one second (CI, stop 32), and was charged in full by
  // the next sample. A slice that hides its work stays short.
  if (!w.audit_suspect) {
    w.audit_suspect = true;
    return;
  }
  w.under_reported = true;
  regions_.DistrustReports(job.region_path);
  const std::string what =
      "its processes used " + std::to_string(int64_t(used_ms)) + " ms of GPU time in " +
      core::FormatDuration(std::chrono::milliseconds(int64_t(span_ms))) +
      " (NVML), but the arbiter charged it " + std::to_string(int64_t(charged_ms)) +
      " ms by their reports: from now on it is charged the wall time of its turns";
  hooks_.record("compute_audit", job, what);
  hooks_.tell(job, "warning: job " + std::to_string(job.id) + ": " + what);
  LogWarn("job " + std::to_string(job.id) + ": " + what);
}

}  // namespace gpuslice::daemon
