#include "daemon/control/job_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <optional>
#include <unordered_set>

#include "daemon/base/log.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;

namespace {

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

void JobProcesses::Stop(const Job& job) {
  // An external job's processes are not the daemon's to signal: they run as
  // whoever the engine chose, and its slice (which names them) is written by
  // them. The limits in the shim hold it; the daemon only reports.
  if (job.mode == core::JobMode::kExternal) {
    // A bound job's processes are those below its holder, as its owner.
    if (job.holder_pid > 0) external_.SignalHeld(job, SIGSTOP);
    if (job.holder_pid <= 0) return;
  }
  // The job's cgroup freezer when it has one (it also holds processes that
  // left the group, and a frozen job cannot notice or undo it); else SIGSTOP.
  if (job.pid > 0) (void)launcher_.StopGroup(job.pid, true);
  if (const JobUsage* u = usage_.Find(job.id)) {
    SignalOutsideGroup(processes(), u->pids, job, SIGSTOP);
  }
}

void JobProcesses::Continue(const Job& job) {
  if (job.mode == core::JobMode::kExternal) {
    if (job.holder_pid <= 0) return;
    external_.SignalHeld(job, SIGCONT);
  }
  if (job.pid > 0) (void)launcher_.StopGroup(job.pid, false);
  if (const JobUsage* u = usage_.Find(job.id)) {
    SignalOutsideGroup(processes(), u->pids, job, SIGCONT);
  }
}

void JobProcesses::Kill(Job& job, LiveState& l, const std::string& event_kind,
                        const std::string& why) {
  if (job.mode == core::JobMode::kExternal && job.holder_pid <= 0) {
    // Not ended (see Stop): its launches are held instead, until its
    // owner resumes or releases it.
    if (l.paused) return;
    SliceLimits limits = hooks_.slice_limits(job);
    limits.launches_paused = true;
    if (regions_.Update(job.region_path, limits).ok()) l.paused = true;
    hooks_.record_event(event_kind, job.id, job.user, why + "; launches paused (external job)");
    LogWarn("job " + std::to_string(job.id) + " paused by the watchdog: " + why);
    return;
  }
  l.ending = JobState::kCancelled;
  l.ending_reason = "killed by the watchdog: " + why;
  l.kill_at_ms = clock_.NowMs();  // No grace: it is over its limit now.
  if (job.pid > 0) (void)launcher_.SignalGroup(job.pid, SIGKILL);
  if (job.holder_pid > 0) external_.SignalHeld(job, SIGKILL);
  // GPU processes of the job outside its group (a process that left it but
  // is still the job's, by its slice and its owner).
  if (const JobUsage* u = usage_.Find(job.id)) {
    SignalOutsideGroup(processes(), u->pids, job, SIGKILL);
  }
  hooks_.record_event(event_kind, job.id, job.user, why + "; killed");
  AppendToStderr(job, "job " + std::to_string(job.id) + " killed by the watchdog: " + why);
  LogWarn("job " + std::to_string(job.id) + " killed by the watchdog: " + why);
}

std::unordered_map<int64_t, uint64_t> JobProcesses::JobsOf(const std::vector<int64_t>& pids) {
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
  for (const auto& [id, l] : table_.live()) {
    const Job& job = table_.jobs().at(id);
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
  ProcessTable& procs = processes();
  for (int64_t pid : pids) {
    if (out.count(pid)) continue;
    if (auto g = job_of_group.find(procs.ProcessGroupOf(pid)); g != job_of_group.end()) {
      out[pid] = g->second;
      continue;
    }
    auto c = claimed.find(pid);
    if (c == claimed.end()) continue;
    std::optional<ProcessOwner> owner = procs.OwnerOf(pid);
    if (!owner || owner->uid == table_.jobs().at(c->second).uid) out[pid] = c->second;
  }
  return out;
}

ProcessTable& JobProcesses::processes() {
  if (processes_ != nullptr) return *processes_;
  static ProcProcessTable real;  // Stateless: /proc and kill(2).
  return real;
}

void JobProcesses::AppendToStderr(const Job& job, const std::string& line) const {
  // The job's own stderr log, so the user reads it with `gpuslice logs`.
  std::string path = jobs_dir_ + "/" + std::to_string(job.id) + "/stderr";
  int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;
  std::string text = "gpuslice: " + line + "\n";
  (void)!write(fd, text.data(), text.size());
  close(fd);
}

}  // namespace gpuslice::daemon
