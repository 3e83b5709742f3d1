// Service: what the enforcement watchdog (watch/watchdog.h) and idle reclaim
// do to a job's processes: stop, continue and kill them. See docs/DAEMON.md
// ("Enforcement watchdog").

#include <signal.h>

#include "daemon/base/log.h"
#include "daemon/jobs/service.h"

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

void Service::StopJob(const Job& job) {
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
    SignalOutsideGroup(Processes(), u->pids, job, SIGSTOP);
  }
}

void Service::ContinueJob(const Job& job) {
  if (job.mode == core::JobMode::kExternal) {
    if (job.holder_pid <= 0) return;
    external_.SignalHeld(job, SIGCONT);
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
  if (job.holder_pid > 0) external_.SignalHeld(job, SIGKILL);
  // GPU processes of the job outside its group (a process that left it but
  // is still the job's, by its slice and its owner).
  if (const JobUsage* u = usage_.Find(job.id)) {
    SignalOutsideGroup(Processes(), u->pids, job, SIGKILL);
  }
  RecordEvent(event_kind, job.id, job.user, why + "; killed");
  AppendToStderr(job, "job " + std::to_string(job.id) + " killed by the watchdog: " + why);
  LogWarn("job " + std::to_string(job.id) + " killed by the watchdog: " + why);
}

}  // namespace gpuslice::daemon
