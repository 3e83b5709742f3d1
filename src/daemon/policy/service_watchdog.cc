// Service: the enforcement watchdog (memory and compute), from the usage
// samples (service_usage.cc; foreign GPU use: usage/foreign_use.h). See
// docs/DAEMON.md ("Enforcement watchdog").
//
// Every figure compared here is NVML's (ground truth) or the daemon's own
// (the ledger's allocation); nothing is read back from a file a job can
// write, so a job that rewrites its slice region cannot blind the watchdog.

#include <signal.h>

#include <algorithm>
#include <cstdio>

#include "daemon/base/log.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;

namespace {

std::string Percent(double pct) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", pct);
  return buf;
}

// The job's processes outside its process group that may be signalled. Its
// slice names them (job-written), so only those of the job's own user: a
// job can never make the daemon signal someone else's process.
void SignalOutsideGroup(ProcessTable& procs, const std::vector<int32_t>& pids, const Job& job,
                        int signal) {
  for (int32_t pid : pids) {
    if (procs.ProcessGroupOf(pid) == job.pid) continue;
    (void)procs.SignalIfOwnedBy(pid, job.uid, signal);
  }
}

}  // namespace

void Service::StopJob(const Job& job) {
  // An external job's processes are not the daemon's to signal: they run as
  // whoever the engine chose, and its slice (which names them) is written by
  // them. The limits in the shim hold it; the daemon only reports.
  if (job.mode == core::JobMode::kExternal) {
    // A bound job's processes are those below its holder, as its owner.
    if (job.holder_pid > 0) SignalHeld(job, SIGSTOP);
    if (job.holder_pid <= 0) return;
  }
  // The job's cgroup freezer when it has one (it also holds processes that
  // left the group, and a frozen job cannot notice or undo it); else SIGSTOP.
  if (job.pid > 0) (void)launcher_.StopGroup(job.pid, true);
  if (const JobUsage* u = usage_.Find(job.id)) {
    SignalOutsideGroup(Processes(), u->pids, job, SIGSTOP);
  }
}

void Service::ContinueJob(const Job& job) {
  if (job.mode == core::JobMode::kExternal) {
    if (job.holder_pid <= 0) return;
    SignalHeld(job, SIGCONT);
  }
  if (job.pid > 0) (void)launcher_.StopGroup(job.pid, false);
  if (const JobUsage* u = usage_.Find(job.id)) {
    SignalOutsideGroup(Processes(), u->pids, job, SIGCONT);
  }
}

void Service::KillJob(Job& job, Live& l, const std::string& event_kind, const std::string& why) {
  if (job.mode == core::JobMode::kExternal && job.holder_pid <= 0) {
    // Not ended (see StopJob): its launches are held instead, until its
    // owner resumes or releases it.
    if (l.paused) return;
    SliceLimits limits = SliceLimitsOf(job);
    limits.launches_paused = true;
    if (regions_.Update(job.region_path, limits).ok()) l.paused = true;
    RecordEvent(event_kind, job.id, job.user, why + "; launches paused (external job)");
    LogWarn("job " + std::to_string(job.id) + " paused by the watchdog: " + why);
    return;
  }
  l.ending = JobState::kCancelled;
  l.ending_reason = "killed by the watchdog: " + why;
  l.kill_at_ms = clock_.NowMs();  // No grace: it is over its limit now.
  if (job.pid > 0) (void)launcher_.SignalGroup(job.pid, SIGKILL);
  if (job.holder_pid > 0) SignalHeld(job, SIGKILL);
  // GPU processes of the job outside its group (a process that left it but
  // is still the job's, by its slice and its owner).
  if (const JobUsage* u = usage_.Find(job.id)) {
    SignalOutsideGroup(Processes(), u->pids, job, SIGKILL);
  }
  RecordEvent(event_kind, job.id, job.user, why + "; killed");
  AppendToStderr(job, "job " + std::to_string(job.id) + " killed by the watchdog: " + why);
  LogWarn("job " + std::to_string(job.id) + " killed by the watchdog: " + why);
}

uint64_t Service::MemoryLimitOn(const Job& job, uint32_t gpu) {
  if (job.state == JobState::kSuspended) return 0;  // Holds no GPU meanwhile.
  const auto& mine = job.allocation.gpu_indices;
  bool given = std::find(mine.begin(), mine.end(), gpu) != mine.end();
  return given ? job.allocation.memory_bytes_per_gpu : 0;
}

bool Service::WatchMemory(Job& job, Live& l, const JobUsage& use) {
  const PolicyConfig& rules = options_.rules;
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
    if (!given && IsElastic(job)) continue;
    const uint64_t limit = MemoryLimitOn(job, gpu);
    auto r = use.registered_by_gpu.find(gpu);
    const uint32_t registered = r == use.registered_by_gpu.end() ? 0 : r->second;
    const std::optional<uint64_t> context =
        rules.watchdog_allowance_bytes ? rules.watchdog_allowance_bytes : usage_.ContextSizeOf(gpu);
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
    if (l.stopped) {
      ContinueJob(job);
      l.stopped = false;
      RecordEvent("watchdog", job.id, job.user, "back under its memory limit; continued");
      AppendToStderr(job, "job " + id + " continued: back under its GPU memory limit");
    }
    l.over_limit = false;
    return false;
  }
  bool first = !l.over_limit;
  l.over_limit = true;
  switch (rules.watchdog) {
    case WatchdogAction::kKill:
      KillJob(job, l, "watchdog", what);
      return true;
    case WatchdogAction::kStop:
      if (!l.stopped) {
        StopJob(job);
        l.stopped = true;
        RecordEvent("watchdog", job.id, job.user, what + "; stopped until it is back under");
        AppendToStderr(job, "job " + id + " stopped by the watchdog: " + what +
                                "; it continues once back under (end the process that "
                                "holds the memory, or `gpuslice cancel " +
                                id + "`)");
        LogWarn("job " + id + " stopped by the watchdog: " + what);
      }
      return false;
    case WatchdogAction::kReport:
      if (first) {
        RecordEvent("watchdog", job.id, job.user, what + "; reported");
        AppendToStderr(job, "warning: job " + id + ": " + what);
        LogWarn("job " + id + ": " + what);
      }
      return false;
    case WatchdogAction::kOff:
      break;
  }
  return false;
}

bool Service::WatchCompute(Job& job, Live& l, const JobUsage& use) {
  const PolicyConfig& rules = options_.rules;
  // Whole GPUs and memory-only slices have no share. A hard share is a
  // bound at all times; a work-conserving one only while other slices wait
  // for the GPU (it may use what they leave): it is held to its share for
  // the part of the window in which the arbiter saw others waiting.
  uint32_t share = job.allocation.compute_milli;
  const bool work_conserving = job.request.compute_mode == core::ComputeMode::kWorkConserving;
  const bool changed = share != l.sm_window_share || work_conserving != l.sm_window_work_conserving;
  if (rules.watchdog_compute == WatchdogAction::kOff || share == 0 || share >= 1000 || changed) {
    l.sm_window.clear();
    l.contended_window.clear();
    l.charged_window.clear();
    l.audit_suspect = false;
    l.sm_window_share = share;
    l.sm_window_work_conserving = work_conserving;
    if (rules.watchdog_compute == WatchdogAction::kOff || share == 0 || share >= 1000) return false;
  }
  int64_t now = use.sampled_ms;
  l.sm_window.emplace_back(now, use.sm_pct_by_gpu);
  l.contended_window.push_back(work_conserving ? regions_.ContendedNs(job.region_path) : 0);
  l.charged_window.push_back(regions_.ChargedNs(job.region_path));
  while (!l.sm_window.empty() &&
         l.sm_window.front().first <= now - rules.watchdog_compute_window_ms) {
    l.sm_window.pop_front();
    l.contended_window.pop_front();
    l.charged_window.pop_front();
  }
  // A full window only: the arbiter withholds an over-using slice's turns
  // within a few of them; use that stays high for a whole window came
  // without turns (a process that bypasses the shim's gate).
  int64_t covered = now - l.sm_window.front().first +
                    options_.sample_interval_ms;  // Each sample stands for one interval.
  if (covered < rules.watchdog_compute_window_ms) return false;
  AuditCharge(job, l);
  std::map<uint32_t, double> sum;
  for (const auto& [at, per_gpu] : l.sm_window) {
    for (const auto& [gpu, pct] : per_gpu) sum[gpu] += std::min(100.0, pct);
  }
  double share_pct = share / 10.0;
  double allowed_pct = share_pct;
  std::string contention;
  if (work_conserving) {
    // Its share while others waited, the whole GPU the rest of the time.
    const int64_t span_ms = now - l.sm_window.front().first;
    const uint64_t waited_ns = l.contended_window.back() - l.contended_window.front();
    const double contended =
        span_ms > 0 ? std::clamp(double(waited_ns) / (double(span_ms) * 1e6), 0.0, 1.0) : 0.0;
    allowed_pct = share_pct + (1.0 - contended) * (100.0 - share_pct);
    contention =
        " while other slices waited for the GPU " + Percent(100.0 * contended) + " of the time";
  }
  std::string what;
  for (const auto& [gpu, total] : sum) {
    double avg = total / static_cast<double>(l.sm_window.size());
    if (avg <= allowed_pct + rules.watchdog_compute_margin_pct) continue;
    what = "its processes used " + Percent(avg) + " of GPU " + std::to_string(gpu) +
           " (NVML) over " +
           core::FormatDuration(std::chrono::milliseconds(rules.watchdog_compute_window_ms)) +
           contention + ", far over its share of " + core::FormatShareMilli(share) + " (margin " +
           Percent(rules.watchdog_compute_margin_pct) + "): a process bypasses its turns";
    break;
  }
  if (what.empty()) {
    l.over_share = false;
    return false;
  }
  bool first = !l.over_share;
  l.over_share = true;
  if (rules.watchdog_compute == WatchdogAction::kKill) {
    KillJob(job, l, "watchdog_compute", what);
    return true;
  }
  if (first) {
    RecordEvent("watchdog_compute", job.id, job.user, what + "; reported");
    AppendToStderr(job, "warning: job " + std::to_string(job.id) + ": " + what);
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
void Service::AuditCharge(const core::Job& job, Live& l) {
  constexpr double kAuditRatio = 1.25;
  constexpr double kAuditSlackPct = 5.0;
  if (l.under_reported || l.sm_window.size() < 2) return;
  // Each NVML sample stands for the interval before it, and is counted only
  // on a GPU where NVML listed the job's processes at the interval's start:
  // a process that appeared within it has a figure for part of it only
  // (counted as the whole, an honest job's first second read 555 ms used
  // against 365 ms charged). Its charge over the intervals counted.
  double used_ms = 0, charged_ms = 0, span_ms = 0;
  for (size_t i = 1; i < l.sm_window.size(); ++i) {
    const auto& [at, now_pct] = l.sm_window[i];
    const auto& [before_at, before_pct] = l.sm_window[i - 1];
    const std::optional<uint64_t> c0 = l.charged_window[i - 1], c1 = l.charged_window[i];
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
    l.audit_suspect = false;
    return;
  }
  // Short at two samples in a row. A process publishes the GPU time of its
  // work once it sees the work complete, so the charge trails NVML by the
  // time its publishing thread takes to run: on a CPU-starved 2-core machine
  // an honest 50% slice that resumed after a stall read 115 ms used against
  // 21 ms charged over one second (CI, stop 32), and was charged in full by
  // the next sample. A slice that hides its work stays short.
  if (!l.audit_suspect) {
    l.audit_suspect = true;
    return;
  }
  l.under_reported = true;
  regions_.DistrustReports(job.region_path);
  const std::string what =
      "its processes used " + std::to_string(int64_t(used_ms)) + " ms of GPU time in " +
      core::FormatDuration(std::chrono::milliseconds(int64_t(span_ms))) +
      " (NVML), but the arbiter charged it " + std::to_string(int64_t(charged_ms)) +
      " ms by their reports: from now on it is charged the wall time of its turns";
  RecordEvent("compute_audit", job.id, job.user, what);
  AppendToStderr(job, "warning: job " + std::to_string(job.id) + ": " + what);
  LogWarn("job " + std::to_string(job.id) + ": " + what);
}

}  // namespace gpuslice::daemon
