#pragma once

// Shell jobs and `run -i` (docs/DAEMON.md): the client, not the daemon,
// starts the job's process once the job is placed, tells the daemon its
// pid (Attach), waits for it and reports its exit status (ReportExit).
//
// It owns the checks of both reports (the process must be the caller's own
// child, attached once, before it runs anything) and how long a job whose
// processes are gone waits for its client's report. The jobs and their
// live state are the job table's; the job's cgroup is the Launcher's; a
// job's row is written, and the queue planned again, through
// JobTransitions; ending the job is Service's watch of running jobs,
// asked through `Hooks`. One thread, as Service.

#include <cstdint>
#include <functional>

#include "core/jobs/job.h"
#include "core/status.h"
#include "daemon/launch/launcher.h"
#include "daemon/requests/caller.h"
#include "daemon/table/job_table.h"
#include "daemon/table/job_transitions.h"

namespace gpuslice::daemon {

class ShellJobs {
 public:
  // How long a shell job whose processes are gone waits for its client's
  // report of their exit status.
  static constexpr int64_t kExitReportGraceMs = 2'000;

  // What it asks of the daemon.
  struct Hooks {
    // Ends the jobs whose processes are gone (Service's watch of running
    // jobs): a reported exit ends its job at once.
    std::function<void()> watch_running;
  };

  // `table`, `launcher` and `transitions` outlive it.
  ShellJobs(JobTable& table, Launcher& launcher, JobTransitions& transitions, Hooks hooks)
      : table_(table), launcher_(launcher), transitions_(transitions), hooks_(std::move(hooks)) {}

  // The client started shell job `id`'s process `pid` (held before it runs
  // anything): it must be the caller's own process and (unless an admin
  // calls) a child of the calling process; it goes into the job's cgroup
  // and the job is tracked by it from then on. Once per job.
  core::Status Attach(const Caller& caller, uint64_t id, int64_t pid);
  // The client reports how shell job `id`'s process ended; ok for a job
  // that has ended already.
  core::Status ReportExit(const Caller& caller, uint64_t id, int exit_code);
  // A shell job (or run -i) whose processes are gone before its client
  // reported their exit status: true while the daemon still waits for it
  // (kExitReportGraceMs from when they were first seen gone, `now`).
  bool AwaitExitReport(LiveState& l, int64_t now) const;

 private:
  JobTable& table_;
  Launcher& launcher_;
  JobTransitions& transitions_;
  Hooks hooks_;
};

}  // namespace gpuslice::daemon
