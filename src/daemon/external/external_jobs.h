#pragma once

// External jobs (mode external; docs/KUBERNETES.md, "External jobs", and
// docs/SLURM.md), as a component Service owns: a slice held for processes
// that someone else starts (a Kubernetes container, a Slurm step). This
// holds what is theirs alone: the checks of their request and of a binding
// to the caller at submission, the group a root-owned one's slice files are
// shared with, who holds the GPUs a refused one asked for, and, for a job
// bound to a process (Job::holder_pid), whether that holder lives, the
// processes below it that are the daemon's to signal, and the job's end in
// the watch of the running jobs.
//
// It owns no per-job state: a bound job's holder is the job's own
// (Job::holder_pid, holder_start_time, in the ledger), and how the daemon is
// ending a job is the job table's. What it needs of the job table it asks
// through `Jobs`; the job's end goes through the daemon's (FinishJob, whose
// state change is Service::ChangeState). One thread, as Service.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/jobs/job.h"
#include "core/jobs/request.h"
#include "core/status.h"
#include "daemon/launch/launcher.h"
#include "daemon/launch/peer_process.h"
#include "daemon/node/process_table.h"

namespace gpuslice::daemon {

class ExternalJobs {
 public:
  // Root's external jobs get one of this many slice groups, from the
  // admin's base (ServerConfig::external_gid_base).
  static constexpr uint64_t kGids = 1ull << 20;

  // What it asks of the job table.
  struct Jobs {
    // Calls `visit` with each running job, by ascending id.
    std::function<void(const std::function<void(const core::Job&)>& visit)> for_each_running;
    // The node's processes: their owners, their tree, and signals to them.
    std::function<ProcessTable&()> processes;
    // Ends `job` in `state` (its slice released, the state changed through
    // Service::ChangeState).
    std::function<void(core::Job& job, core::JobState state, int exit_code, std::string reason)>
        finish;
  };

  // `gid_base`: ServiceOptions::external_gid_base (0: no slice groups).
  ExternalJobs(uint32_t gid_base, Jobs jobs, Launcher& launcher)
      : gid_base_(gid_base), jobs_(std::move(jobs)), launcher_(launcher) {}

  // An external job's request from `fields`: refused when it asks for what
  // needs a cgroup of the daemon's (cpus, host_mem) or a range of whole GPUs.
  core::Result<core::ResourceRequest> CheckRequest(const core::RequestFields& fields) const;
  // Binds `job` to the caller's process (`bound_to_caller`): `process`, the
  // one pinned at accept on the unix socket (`local`), must run now; its pid
  // and start time become the job's holder.
  core::Status BindToCaller(bool local, const PeerProcess* process, core::Job* job) const;

  // An external job's slice group (SliceLimits::shared_gid), 0 for others.
  uint32_t SharedGidOf(const core::Job& job) const;
  // "; GPU-x is held whole by job 7 (alice, Slurm job 12): ..." for each of
  // `uuids` that running jobs hold: why an external job was refused.
  std::string HoldersOf(const std::vector<std::string>& uuids, core::RequestKind wanted) const;

  // Whether a bound job's holder runs (the same process, not a later one at
  // its pid, and not a zombie).
  bool HolderAlive(const core::Job& job);
  // A bound external job's processes (Job::holder_pid): those below its
  // holder in the process tree that run as the job's owner. Only these, and
  // never the holder itself, are the daemon's to signal.
  std::vector<int64_t> HeldProcesses(const core::Job& job);
  void SignalHeld(const core::Job& job, int signal);

  // An external job's end in the watch of the running jobs (`ending`: the
  // state the daemon is ending it in, for `ending_reason`, if it is; its
  // processes are killed at `*kill_at_ms`): released when its holder is
  // gone; ended by the daemon (cancel with processes, deadline, policy)
  // once its processes are. True when it finished.
  bool Watch(core::Job& job, const std::optional<core::JobState>& ending,
             const std::string& ending_reason, int64_t* kill_at_ms, int64_t now);

 private:
  const uint32_t gid_base_;
  Jobs jobs_;
  Launcher& launcher_;
};

}  // namespace gpuslice::daemon
