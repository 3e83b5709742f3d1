#pragma once

// Recovery after a restart: the state directory's modes, and the live jobs
// the ledger recorded, taken back at start. It owns the crash-safe launch
// rules (a job recorded running with no pid is adopted when its processes
// are found, ended when its supervisor left an exit status, queued again
// only when it left no trace, failed otherwise) and the re-adoption of
// running, suspended and queued jobs. It changes jobs only through
// JobTransitions, and asks others (Hooks) for the capacity, the queue, the
// waits, suspensions, a job's directory and a placed job's undoing.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/jobs/job.h"
#include "core/status.h"
#include "daemon/base/clock.h"
#include "daemon/compute/region_store.h"
#include "daemon/launch/launcher.h"
#include "daemon/placement/capacity.h"
#include "daemon/table/job_table.h"
#include "daemon/table/job_transitions.h"

namespace gpuslice::daemon {

class Recovery {
 public:
  struct Options {
    std::string state_dir;
    // Finished jobs kept in memory (ServiceOptions::history), and how long
    // one that ended recently stays beyond that.
    size_t history = 1000;
    int64_t keep_ended_ms = 0;
    // The process groups of a job's processes, found by its identity;
    // unset: FindProcessGroupsByEnv over /proc (job_finder.h).
    std::function<std::vector<int64_t>(const core::Job& job)> find_job_groups;
  };
  struct Hooks {
    // The node's capacity (set before Recover is called).
    std::function<NodeCapacity&()> capacity;
    // A job placed but never started: its slice removed, its allocation
    // and start forgotten.
    std::function<void(core::Job&)> forget_start;
    // Puts a queued job in the queue.
    std::function<void(const core::Job&)> enqueue;
    // A queued job's dependencies judged again; the reason when broken.
    std::function<std::optional<std::string>(const core::Job&)> rewait;
    // A queued job held by `gpuslice hold`.
    std::function<void(uint64_t)> hold;
    // A running or suspended job's suspension state taken back.
    std::function<void(core::Job&)> recover_suspension;
    // Why a job holds GPUs outside the pool it asked for.
    std::function<std::string(const core::Job&)> outside_pool_text;
    // A job's directory (its logs and its supervisor's exit status).
    std::function<std::string(uint64_t)> job_dir;
  };

  Recovery(Options options, Hooks hooks, JobTable& table, JobTransitions& transitions,
           Launcher& launcher, RegionStore& regions, Clock& clock)
      : options_(std::move(options)),
        hooks_(std::move(hooks)),
        table_(table),
        transitions_(transitions),
        launcher_(launcher),
        regions_(regions),
        clock_(clock) {}

  // Creates the state directory 0711 and jobs/ 0700, and fixes the modes an
  // older install left (state dir, job dirs, ledger files).
  core::Status SecureStateDir();
  // Takes back every job the ledger recorded: finished ones into the
  // history, live ones adopted, ended, queued again or failed; then ends
  // stray processes and trims the history.
  void Recover(std::vector<core::Job> all);

 private:
  // Crash-safe launching: a job launched before it is recorded would run
  // twice after a crash. A job about to be launched is first
  // recorded as running in its slice with no pid (its launch intent); its
  // pid follows once known. A restart that finds such a job looks for its
  // processes instead of starting it again: adopted when found, ended when
  // its supervisor left an exit status, queued again only when it left no
  // trace at all (no log file: the launch never began), failed otherwise.
  // Returns false when the job was ended.
  bool ResolveInterruptedLaunch(core::Job& job);

  const Options options_;
  const Hooks hooks_;
  JobTable& table_;
  JobTransitions& transitions_;
  Launcher& launcher_;
  RegionStore& regions_;
  Clock& clock_;
};

}  // namespace gpuslice::daemon
