#pragma once

// What the daemon does to a job's processes, and which job a process is:
// stop, continue and kill them (the enforcement watchdog, idle reclaim,
// suspension), a line in the job's own stderr log, and the one place that
// decides which job each GPU process belongs to. See docs/DAEMON.md
// ("Enforcement watchdog", "Usage sampling"). Service owns it; it reads the
// job table and never changes a job's state (a kill sets how the job is
// ending; Service ends it once its processes are gone). One thread, as
// Service.

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/jobs/job.h"
#include "daemon/base/clock.h"
#include "daemon/compute/region_store.h"
#include "daemon/external/external_jobs.h"
#include "daemon/launch/launcher.h"
#include "daemon/node/process_table.h"
#include "daemon/table/job_table.h"
#include "daemon/usage/usage_book.h"

namespace gpuslice::daemon {

class JobProcesses {
 public:
  struct Hooks {
    // The slice limits of a job as it is now (JobSetup::SliceLimitsOf).
    std::function<SliceLimits(const core::Job& job)> slice_limits;
    std::function<void(std::string kind, uint64_t job_id, std::string user, std::string message)>
        record_event;
  };
  // `processes`: owners, process groups and signals of processes; null:
  // /proc and kill(2). `jobs_dir`: where each job's directory (its logs) is.
  JobProcesses(std::string jobs_dir, ProcessTable* processes, const JobTable& table,
               Launcher& launcher, RegionStore& regions, const UsageBook& usage,
               ExternalJobs& external, Clock& clock, Hooks hooks)
      : jobs_dir_(std::move(jobs_dir)),
        processes_(processes),
        table_(table),
        launcher_(launcher),
        regions_(regions),
        usage_(usage),
        external_(external),
        clock_(clock),
        hooks_(std::move(hooks)) {}

  ProcessTable& processes();

  // Which job each of `pids` (GPU processes from NVML) belongs to; absent:
  // none. First the job whose cgroup holds the pid, then the job's process
  // group, else a slice's process slots when the process is the job user's.
  std::unordered_map<int64_t, uint64_t> JobsOf(const std::vector<int64_t>& pids);
  // Freezes / thaws every process of a job (its group and the processes of
  // its slice outside it). One seam, so cgroup freezing can replace it.
  void Stop(const core::Job& job);
  void Continue(const core::Job& job);
  // Ends a job at once (SIGKILL to its group and to its GPU processes
  // outside it), with an event and a line in its log: `live` says it is
  // ending (cancelled, no grace). An external job without a holder is not
  // the daemon's to kill: its launches are paused instead.
  void Kill(core::Job& job, LiveState& live, const std::string& event_kind, const std::string& why);
  // Appends "gpuslice: `line`" to the job's stderr log, which its user
  // reads with `gpuslice logs`; nothing when the log is gone.
  void AppendToStderr(const core::Job& job, const std::string& line) const;

 private:
  std::string jobs_dir_;
  ProcessTable* processes_;
  const JobTable& table_;
  Launcher& launcher_;
  RegionStore& regions_;
  const UsageBook& usage_;
  ExternalJobs& external_;
  Clock& clock_;
  Hooks hooks_;
};

}  // namespace gpuslice::daemon
