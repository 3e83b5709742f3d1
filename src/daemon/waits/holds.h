#pragma once

// Holds (`gpuslice hold`, `release`; docs/DAEMON.md, "Changing queued
// jobs"): which queued jobs their owner or an admin keeps from starting. A
// held job is held out of the queue plan like a job waiting for its
// dependencies: it takes nothing, is never the head, and delays no one.
//
// Who may hold and release a job, and the hold's kind, are the job's
// (Job::hold, persisted in the ledger); this is the set of held jobs the
// plan asks about, rebuilt from the jobs after a restart. One thread, as
// Service.

#include <cstdint>
#include <string>
#include <unordered_set>

#include "core/jobs/job.h"

namespace gpuslice::daemon {

class JobHolds {
 public:
  // Queued job `id` is held (again, after a restart).
  void Hold(uint64_t id) { held_.insert(id); }
  // Released, or no longer queued (started or ended).
  void Release(uint64_t id) { held_.erase(id); }
  // Whether queued job `id` is held (from placement).
  bool Holds(uint64_t id) const { return held_.count(id) > 0; }
  // Whether any job is held (the planner's hold is needed at all).
  bool any() const { return !held_.empty(); }

  // What `ps` says a held job waits for: "held (gpuslice release 7)", or
  // for an admin's hold "held by an admin (an admin releases it: gpuslice
  // release 7)"; "" when `job` is not held.
  static std::string WaitingText(const core::Job& job);

 private:
  std::unordered_set<uint64_t> held_;
};

}  // namespace gpuslice::daemon
