// Service: the enforcement watchdog (memory and compute) and foreign GPU
// use, from the usage samples (service_usage.cc). See docs/DAEMON.md
// ("Enforcement watchdog", "Foreign GPU use").
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

void Service::WatchForeign(const std::unordered_map<int64_t, uint64_t>& job_of_pid,
                           const OverLimit& over_limit) {
  const PolicyConfig& rules = options_.rules;
  const std::string admin_group = options_.admin_gid ? GroupNameOf(*options_.admin_gid) : "";
  std::vector<ForeignProcess> now;
  std::unordered_map<int64_t, int> seen;
  std::unordered_map<int64_t, std::string> spared_as;  // Why `foreign` leaves it.
  // The processes a root-owned external job's slice names (a pod's
  // containers, docs/KUBERNETES.md): they run as uids nobody knows in
  // advance, so their claim does not make them the job's, but only holders
  // of the slice's own group can write those slots. Charged, never ended.
  std::unordered_map<int64_t, uint64_t> container_of;
  for (const auto& [id, l] : live_) {
    const Job& job = jobs_[id];
    if (SharedGidOf(job) == 0 || job.region_path.empty()) continue;
    if (auto pids = regions_.Pids(job.region_path); pids.ok()) {
      for (int32_t pid : *pids) container_of.emplace(pid, id);
    }
  }
  // Foreign use of one GPU, or of one MIG instance: bytes, and who (the
  // largest process, "and N more").
  struct Use {
    uint64_t bytes = 0;
    uint64_t largest = 0;
    size_t processes = 0;
    std::string who;
    void Add(const GpuProcess& p, const std::string& user) {
      bytes += p.used_memory;
      if (who.empty() || p.used_memory > largest) {
        largest = p.used_memory;
        who = "pid " + std::to_string(p.pid) + ", user " + user;
      }
      ++processes;
    }
    std::string Who() const {
      return processes > 1 ? who + ", and " + std::to_string(processes - 1) + " more" : who;
    }
  };
  std::map<uint32_t, Use> per_gpu;
  std::map<std::string, Use> per_mig;  // By MIG UUID.
  // Per foreign pid on a GPU in MIG mode: every MIG device of its GPU
  // instance (they share the instance's memory).
  std::unordered_map<int64_t, std::vector<std::string>> instance_of;
  std::set<uint32_t> mig_gpus;
  for (const GpuUsage& g : usage_.gpus()) {
    auto info = std::find_if(inventory_.gpus.begin(), inventory_.gpus.end(),
                             [&](const GpuInfo& x) { return x.index == g.index; });
    bool mig = info != inventory_.gpus.end() && info->mig_enabled;
    if (mig) mig_gpus.insert(g.index);
    for (const GpuProcess& p : g.processes) {
      if (job_of_pid.count(p.pid)) continue;
      ForeignProcess f;
      f.gpu_index = g.index;
      f.pid = p.pid;
      f.used_memory = p.used_memory;
      f.user = "?";
      if (std::optional<ProcessOwner> o = Processes().OwnerOf(p.pid)) {
        f.uid = o->uid;
        f.user = o->user;
        const auto& allowed = rules.foreign_allowed_groups;
        for (const std::string& grp : o->groups) {
          if (!admin_group.empty() && grp == admin_group) spared_as[p.pid] = "the admin group";
          if (std::find(allowed.begin(), allowed.end(), grp) != allowed.end() &&
              !spared_as.count(p.pid)) {
            spared_as[p.pid] = "an allowed group";
          }
        }
        if (auto c = container_of.find(p.pid); c != container_of.end()) {
          spared_as[p.pid] = "a container of external job " + std::to_string(c->second);
        }
        if (o->uid == 0) spared_as[p.pid] = "root";
        f.spared = spared_as.count(p.pid) > 0;
      }
      per_gpu[g.index].Add(p, f.user);
      if (mig) {
        if (const MigInstance* m = MigInstanceOf(*info, p)) f.mig_uuid = m->uuid;
        // Every MIG device of its GPU instance: they share that instance's
        // memory, and a job on one is given all of it. A process whose
        // instance NVML does not name takes none (it is still shown).
        for (const MigInstance& m : info->mig) {
          if (p.gpu_instance_id != kNoMigInstance && m.gpu_instance_id == p.gpu_instance_id) {
            per_mig[m.uuid].Add(p, f.user);
            instance_of[p.pid].push_back(m.uuid);
          }
        }
      }
      if (!seen.count(p.pid)) {
        auto before = foreign_seen_.find(p.pid);
        seen[p.pid] = before == foreign_seen_.end() ? 1 : before->second + 1;
      }
      now.push_back(std::move(f));
    }
  }
  // Charged in placement at once (NVML says the memory is taken, whoever
  // holds it): a whole GPU's memory, or a MIG instance whole; and on a whole
  // GPU, the memory jobs hold over their limits. A GPU or instance without
  // such use is cleared.
  if (capacity_) {
    for (const GpuInfo& g : inventory_.gpus) {
      if (g.mig_enabled) {
        for (const MigInstance& m : g.mig) {
          auto it = per_mig.find(m.uuid);
          if (it == per_mig.end()) {
            capacity_->SetForeignMig(m.uuid, 0, "");
          } else {
            capacity_->SetForeignMig(m.uuid, it->second.bytes, it->second.Who());
          }
        }
        continue;
      }
      auto it = per_gpu.find(g.index);
      if (it == per_gpu.end()) {
        capacity_->SetForeign(g.index, 0, "");
      } else {
        capacity_->SetForeign(g.index, it->second.bytes, it->second.Who());
      }
      auto over = over_limit.find(g.index);
      if (over == over_limit.end()) {
        capacity_->SetOverLimit(g.index, 0, "");
      } else {
        capacity_->SetOverLimit(g.index, over->second.first, over->second.second);
      }
    }
  }
  // Which processes `foreign` ends (protect: those that take promised
  // memory). A process is
  // ended from its second sample on (a job's process may be listed once
  // between its job's end and NVML's next update), never root's, the admin
  // group's or an allowed group's, never one whose owner is unknown (gone).
  auto endable = [&](const ForeignProcess& f) { return !f.spared && f.uid >= 0; };
  std::set<int64_t> to_end;
  std::map<int64_t, std::string> end_why;
  if (rules.foreign == ForeignAction::kKill) {
    for (const ForeignProcess& f : now) {
      if (endable(f)) to_end.insert(f.pid);
    }
  } else if (rules.foreign == ForeignAction::kProtect && capacity_) {
    // On a whole GPU: what no job was promised there, less what jobs hold
    // over their limits and what spared processes hold, is what the others
    // may hold. Past it they take memory a job was promised (it would fail
    // inside its own limit): the largest are ended until the rest fits.
    std::map<uint32_t, std::vector<const ForeignProcess*>> endable_on;
    std::map<uint32_t, uint64_t> spared_bytes;
    for (const ForeignProcess& f : now) {
      if (mig_gpus.count(f.gpu_index)) continue;
      if (endable(f)) {
        endable_on[f.gpu_index].push_back(&f);
      } else {
        spared_bytes[f.gpu_index] += f.used_memory;
      }
    }
    for (auto& [gpu, list] : endable_on) {
      uint64_t room = capacity_->UnpromisedBytes(gpu);
      auto over = over_limit.find(gpu);
      const uint64_t taken =
          (over == over_limit.end() ? 0 : over->second.first) + spared_bytes[gpu];
      room = room > taken ? room - taken : 0;
      uint64_t held = 0;
      for (const ForeignProcess* f : list) held += f->used_memory;
      std::sort(list.begin(), list.end(), [](const ForeignProcess* a, const ForeignProcess* b) {
        return a->used_memory > b->used_memory;
      });
      for (const ForeignProcess* f : list) {
        if (held <= room) break;
        held -= f->used_memory;
        to_end.insert(f->pid);
        end_why[f->pid] = "it takes memory promised to jobs on GPU " + std::to_string(gpu) + " (" +
                          core::FormatBytes(room) + " of it is free for use outside them)";
      }
    }
    // In MIG mode: a process in a GPU instance a job holds takes its memory.
    for (const ForeignProcess& f : now) {
      if (!endable(f) || !instance_of.count(f.pid)) continue;
      for (const std::string& uuid : instance_of[f.pid]) {
        if (!capacity_->MigHeldByJob(uuid)) continue;
        to_end.insert(f.pid);
        end_why[f.pid] = "it runs in MIG " + uuid + ", which a job holds";
        break;
      }
    }
  }
  // Reported once each, from the second sample on; ended (once) when
  // `foreign` says so, which may come later than the report (protect: once
  // it takes memory a job was promised).
  for (const ForeignProcess& f : now) {
    if (seen[f.pid] < 2) continue;
    const bool end = to_end.count(f.pid) && !foreign_ended_.count(f.pid);
    if (!end && foreign_reported_.count(f.pid)) continue;
    foreign_reported_.insert(f.pid);
    std::string what = "pid " + std::to_string(f.pid) + " (user " + f.user + ") holds " +
                       core::FormatBytes(f.used_memory) + " on GPU " + std::to_string(f.gpu_index) +
                       (f.mig_uuid.empty() ? " outside gpuslice; charged to the GPU in placement"
                                           : " (MIG " + f.mig_uuid +
                                                 ") outside gpuslice; the instance is taken in "
                                                 "placement");
    const std::string mode = "foreign = " + std::string(ForeignActionName(rules.foreign));
    if (end) {
      foreign_ended_.insert(f.pid);
      core::Status s = Processes().SignalIfOwnedBy(f.pid, uint32_t(f.uid), SIGKILL);
      const std::string because = end_why.count(f.pid) ? ": " + end_why[f.pid] : "";
      what += s.ok() ? "; killed" + because + " (" + mode + ")"
                     : "; cannot kill it" + because + ": " + s.message();
    } else if (rules.foreign != ForeignAction::kReport && f.spared) {
      what += "; spared (" + spared_as[f.pid] + ")";
    } else if (rules.foreign == ForeignAction::kKill && f.uid < 0) {
      what += "; gone before it could be ended";
    }
    RecordEvent("foreign_process", 0, f.user, what);
    LogWarn(what);
  }
  foreign_seen_ = std::move(seen);
  // Forget pids that are gone, so a reused pid is reported anew.
  for (auto it = foreign_reported_.begin(); it != foreign_reported_.end();) {
    it = foreign_seen_.count(*it) ? std::next(it) : foreign_reported_.erase(it);
  }
  for (auto it = foreign_ended_.begin(); it != foreign_ended_.end();) {
    it = foreign_seen_.count(*it) ? std::next(it) : foreign_ended_.erase(it);
  }
  foreign_ = std::move(now);
}

}  // namespace gpuslice::daemon
