#pragma once

// What the components that make room for the head of the queue
// (preemptions.h, defragmenter.h) see of the daemon's running jobs, and how
// they ask it to suspend one. Service builds these from its job table; the
// components never hold a job's state of their own.

#include <cstdint>
#include <string>

#include "core/jobs/job.h"

namespace gpuslice::daemon {

// A running or suspended job and what the daemon is doing with it now.
struct LiveJob {
  const core::Job* job = nullptr;
  bool ending = false;         // Being cancelled, timed out, preempted or reclaimed.
  bool checkpointing = false;  // A suspend or resume in flight on a worker thread.
  bool stopped = false;        // Stopped by the watchdog (watchdog = stop).
  bool suspended() const { return job->state == core::JobState::kSuspended; }
};

// Why the daemon suspends a running job to make room (Service's
// SuspendCause for it): what happens when the suspension fails, and what
// once it is done, follow from it.
struct SuspendToMakeRoom {
  std::string by;              // "preemption by job 12 (high priority)".
  uint64_t preempted_for = 0;  // Preemption: ended instead when it fails.
  uint64_t reclaimed_for = 0;  // Reclaim: requeued instead (restartable), else runs on.
  std::string move_to;         // Defragmentation: the GPU it resumes on.
  uint64_t defrag_for = 0;     // Defragmentation: the job whose start it is for.
};

}  // namespace gpuslice::daemon
